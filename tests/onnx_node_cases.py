"""The ONNX backend node-test cases of the given names, from the onnx wheel's generators (collect_testcases makes all
1,884 at once: a few seconds, done once per process). The browser suite (e2e/test_browser_suite.py) runs this module in
the test process and gives the page a proxy of it, so the page gets its few cases in one call: iterating the 1,884
cases through proxies took a round trip per case (over 6 minutes in the page)."""
import functools, warnings

@functools.cache
def _all_cases() -> dict:
  from onnx.backend.test.case.node import collect_testcases
  with warnings.catch_warnings():   # (numpy's, computing some cases' expected outputs: overflow in casts, log(0), ...)
    warnings.simplefilter("ignore")
    return {c.name: c for c in collect_testcases()}

def node_cases(names) -> dict:
  """{name: case} for the names that are node tests of the installed onnx (the others are left out)."""
  cases = _all_cases()
  return {n: cases[n] for n in names if n in cases}
