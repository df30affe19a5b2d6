"""The playground page: type Python, click Run (a real click), read the output and the device it reports."""

def test_type_code_click_run_see_output(page):
  page.fill("#code", "from tinyweb import Tensor\n"
                     "x = Tensor([[1.0, 2.0], [3.0, 4.0]])\n"
                     "print('sum', (x @ x).sum().item())\n"
                     "(x * 10).tolist()")
  page.click("#run")
  page.wait_for_function("document.querySelector('#output').textContent !== 'running…' && !document.querySelector('#run').disabled")
  # [[1,2],[3,4]] squared is [[7,10],[15,22]]: sum 54
  assert page.text_content("#output") == "sum 54.0\n[[10.0, 20.0], [30.0, 40.0]]"
  assert page.text_content("#device") == "WEBGPU"
  report = page.evaluate("window.tinyweb.report")
  assert report["webgpu"] and page.text_content("#adapter") != "no WebGPU adapter"
  assert page.is_hidden("#notice")

def test_python_errors_show_in_the_output(page):
  page.fill("#code", "from tinyweb import Tensor\nTensor([1.0, 2.0]) + Tensor([1.0, 2.0, 3.0])")
  page.click("#run")
  page.wait_for_function("document.querySelector('#output').textContent !== 'running…' && !document.querySelector('#run').disabled")
  out = page.text_content("#output")
  assert "Traceback" in out and "(2,)" in out and "(3,)" in out, out
