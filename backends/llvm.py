"""The LLVM device: kernels rendered to LLVM IR (tinyweb/codegen/llvmir.py), optimized and compiled to object code for the
host CPU by llvmlite, loaded into an in-process ORC JIT and called through ctypes. No C compiler is needed.

Memory, the ctypes calling convention and the split of the outer loop over cores are the CPU device's (backends/cpu.py)."""
from __future__ import annotations
import ctypes, itertools
from tinyweb.device import Compiler, Compiled
from tinyweb.codegen.llvmir import LLVMRenderer
from tinyweb.backends.cpu import CPUAllocator, CoreSplitProgram
from tinyweb.helpers import host_has_fma

def _llvmlite():
  import llvmlite, llvmlite.binding as llvm   # (missing: Device.check names the extra that installs it)
  # llvmlite 0.50 refuses llvm.initialize(); these two are all a JIT for the host needs
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  return llvmlite, llvm

SLP_MAX_VF = 4

class LLVMCompiler(Compiler):
  """LLVM IR -> optimized (the -O3 pipeline, loop and SLP vectorizers) object code for this machine's CPU."""
  def __init__(self):
    super().__init__()
    llvmlite, llvm = _llvmlite()
    self.llvm = llvm
    # SLP trees at most 4 lanes wide: LLVM 22.1's SLP vectorizer miscompiles some 8- and 16-lane trees of our index
    # arithmetic (a 3-d max_pool's backward routed gradients to the wrong elements: tests/test_conv_params.py,
    # test_max_pool_random[LLVM-3]); 4 lanes are as fast for the upcast accumulators it is here for (matmul 512/1024)
    llvm.set_option("", f"-slp-max-vf={SLP_MAX_VF}")
    triple, cpu, features = llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    # position-independent small-code-model objects: the JIT linker places them anywhere and adds stubs for libm calls
    self.tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic",
                                                                    codemodel="default")
    # object code is specific to the LLVM version and to the CPU it was tuned for: both are part of the disk-cache key
    self.cache_key = (f"llvmlite {llvmlite.__version__} LLVM {'.'.join(map(str, llvm.llvm_version_info))} {triple} "
                      f"{cpu} {features} speed_level=3 slp-max-vf={SLP_MAX_VF}")
  def compile(self, src: str) -> bytes:
    try:
      mod = self.llvm.parse_assembly(src)
      mod.triple, mod.data_layout = self.tm.triple, str(self.tm.target_data)
      mod.verify()
    except RuntimeError as e: raise RuntimeError(f"LLVM rejected a kernel's IR: {e}\n--- source ---\n{src}") from e
    pto = self.llvm.create_pipeline_tuning_options(speed_level=3)
    # SLP is off by default in llvmlite; it vectorizes the upcast outputs (a matmul's 8 neighbouring accumulators), which the
    # loop vectorizer cannot: it may not reorder float sums
    pto.slp_vectorization = True
    pb = self.llvm.create_pass_builder(self.tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return self.tm.emit_object(mod)

_library_ids = itertools.count()

class LLVMProgram(CoreSplitProgram):
  def __init__(self, device: LLVMDevice, name: str, lib: bytes):
    # each kernel is its own JIT library (kernel names repeat across kernels); the process provides libm (sinf, exp2f, ...).
    # The tracker keeps the code loaded; the JIT reference keeps the JIT alive as long as the code.
    self.tracker = device.llvm.JITLibraryBuilder().add_object_img(lib).add_current_process().export_symbol(name) \
                                                  .link(device.jit, f"{name}#{next(_library_ids)}")
    self.jit = device.jit
    self.fxn = ctypes.CFUNCTYPE(None)(self.tracker[name])

class LLVMDevice(Compiled):
  fork_safe = True
  def __init__(self, name: str = "LLVM"):
    compiler = LLVMCompiler()
    self.llvm = compiler.llvm
    # JITLink places each object's sections in one block; llvmlite's default linker (RuntimeDyld) maps code and constants
    # separately and aborts the process when a fragmented address space puts them over 2 GiB apart
    # (tests/test_llvm.py::test_kernel_code_and_constants_far_apart_in_memory)
    self.jit = self.llvm.create_lljit_compiler(use_jit_link=True)
    super().__init__(name, CPUAllocator(), LLVMRenderer(fused_multiply_add=host_has_fma()), compiler, LLVMProgram)
