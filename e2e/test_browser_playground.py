"""The playground page: type Python, click Run (a real click), read the output and the device it reports."""
from browser_harness import run_in_playground

def test_type_code_click_run_see_output(page):
  page.fill("#code", "from tinyweb import Tensor\n"
                     "x = Tensor([[1.0, 2.0], [3.0, 4.0]])\n"
                     "print('sum', (x @ x).sum().item())\n"
                     "(x * 10).tolist()")
  page.click("#run")
  page.wait_for_function("document.querySelector('#output').textContent !== 'running…' && !document.querySelector('#run').disabled")
  # [[1,2],[3,4]] squared is [[7,10],[15,22]]: sum 54
  assert page.text_content("#output") == "sum 54.0\n[[10.0, 20.0], [30.0, 40.0]]"
  report = page.evaluate("window.tinyweb.report")
  assert report["webgpu"] and page.text_content("#adapter") != "no WebGPU adapter"
  # (WASM where the adapter is a fallback one, as SwiftShader on this machine: test_browser_ops checks the choice)
  assert page.text_content("#device") == report["device"] == ("WASM" if report["webgpu"]["isFallbackAdapter"] else "WEBGPU")
  assert page.is_hidden("#notice")

def test_python_errors_show_in_the_output(page):
  page.fill("#code", "from tinyweb import Tensor\nTensor([1.0, 2.0]) + Tensor([1.0, 2.0, 3.0])")
  page.click("#run")
  page.wait_for_function("document.querySelector('#output').textContent !== 'running…' && !document.querySelector('#run').disabled")
  out = page.text_content("#output")
  assert "Traceback" in out and "(2,)" in out and "(3,)" in out, out

def test_results_are_shown_as_python_reprs(page):
  # the last expression's repr(), as Python would show it (not JavaScript's String() of a converted value)
  assert [run_in_playground(page, code) for code in ["10.0", "True", "None", "'text'", "[1.0, None, False]", "x = 1", "1 + 1;"]] == \
    ["10.0", "True", "None", "'text'", "[1.0, None, False]", "", ""]
  device = page.evaluate("window.tinyweb.report.device")
  assert run_in_playground(page, "from tinyweb import Tensor\nprint('a')\nTensor([1.0, 2.0]).sum()") == f"a\n<Tensor () float32 on {device}>"

def test_tracebacks_start_at_the_users_code(page):
  out = run_in_playground(page, "def f(x):\n  return x.reshape(5)\n\nfrom tinyweb import Tensor\nf(Tensor([1.0, 2.0]))")
  lines = out.splitlines()
  assert lines[0] == "Traceback (most recent call last):", out
  assert lines[1].startswith('  File "<python-input-') and lines[1].endswith('", line 5, in <module>'), out
  assert lines[2].strip() == "f(Tensor([1.0, 2.0]))" and "line 2, in f" in out and "return x.reshape(5)" in out, out
  assert "_pyodide" not in out and "<tinyweb-host>" not in out and "eval_code" not in out and "run_async" not in out, out
  out = run_in_playground(page, "x = (")   # a syntax error: no frame at all, just where
  assert out.startswith('  File "<python-input-') and out.endswith("SyntaxError: '(' was never closed"), out
