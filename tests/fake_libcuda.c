// A stand-in for libcuda.so.1 that tests the CUDA runtime's ctypes calls on a machine without a GPU (tests/test_cuda.py):
// "device memory" is host memory, kernels do not run; the calls are recorded for the test to read back.
#include <stdlib.h>
#include <string.h>
typedef unsigned long long CUdeviceptr;

// what the test reads: the last launch, the loaded module image, the function name asked for, live allocations
unsigned int launch_grid[3], launch_block[3], launch_shared, launch_count;
CUdeviceptr launch_args[8];
int launch_nargs = 0;   // the test sets how many kernel arguments to record
unsigned char module_head[4];
char function_name[256];
int live_allocs;
int fail_init = 0;   // set to 100 (CUDA_ERROR_NO_DEVICE) to act as a driver without a GPU
static __thread void *current;   // the context current in this thread: calls that need one fail without it, as the driver's
#define NEED_CONTEXT if (current != (void *)0x1) return 201   // CUDA_ERROR_INVALID_CONTEXT

int cuInit(unsigned int flags) { return flags != 0 ? 1 : fail_init; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
int cuDeviceGetName(char *name, int len, int dev) { strncpy(name, "Fake GPU", len); return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) {
  *v = attr == 75 ? 8 : attr == 76 ? 6 : attr == 1 ? 1024 : 0;   // compute capability 8.6, 1024 threads per block
  return 0;
}
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)0x1; return 0; }
int cuCtxSetCurrent(void *ctx) { if (ctx != (void *)0x1) return 201; current = ctx; return 0; }
int cuCtxSynchronize(void) { NEED_CONTEXT; return 0; }
int cuMemAlloc_v2(CUdeviceptr *p, size_t n) { NEED_CONTEXT; *p = (CUdeviceptr)malloc(n); live_allocs++; return 0; }
int cuMemFree_v2(CUdeviceptr p) { NEED_CONTEXT; free((void *)p); live_allocs--; return 0; }
int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { NEED_CONTEXT; memcpy((void *)dst, src, n); return 0; }
int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { NEED_CONTEXT; memcpy(dst, (void *)src, n); return 0; }
int cuModuleLoadData(void **mod, const void *image) { NEED_CONTEXT; memcpy(module_head, image, 4); *mod = (void *)0x2; return 0; }
int cuModuleGetFunction(void **fn, void *mod, const char *name) {
  if (mod != (void *)0x2) return 400;   // CUDA_ERROR_INVALID_HANDLE
  strncpy(function_name, name, sizeof(function_name) - 1);
  *fn = (void *)0x3;
  return 0;
}
int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared,
                   void *stream, void **params, void **extra) {
  NEED_CONTEXT;
  if (fn != (void *)0x3) return 400;
  launch_grid[0] = gx; launch_grid[1] = gy; launch_grid[2] = gz;
  launch_block[0] = bx; launch_block[1] = by; launch_block[2] = bz;
  launch_shared = shared;
  for (int i = 0; i < launch_nargs && i < 8; i++) launch_args[i] = *(CUdeviceptr *)params[i];
  launch_count++;
  return 0;
}
int cuEventCreate(void **ev, unsigned flags) { NEED_CONTEXT; static long next = 0x10; *ev = (void *)next++; return 0; }
int cuEventRecord(void *ev, void *stream) { return 0; }
int cuEventSynchronize(void *ev) { return 0; }
int cuEventElapsedTime(float *ms, void *start, void *end) { *ms = start != end ? 1.5f : 0.0f; return 0; }
int cuGetErrorName(int status, const char **name) { *name = status == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_FAKE"; return 0; }
