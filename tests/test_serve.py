"""tinyweb.serve, the static server for the browser build and weights: Range requests (206 / 416, HEAD), MIME types,
COOP/COEP, conditional requests, keep-alive, the byte counts, and the command line. Each server listens on a free port
of 127.0.0.1 in a thread; responses are read with urllib and checked against the files' own bytes. (The browser side:
e2e/test_browser_weights.py, whose site is served by it, and e2e/test_package.py, which runs the command line.)"""
import http.client, os, re, socket, subprocess, sys, threading, urllib.error, urllib.request
from email.utils import formatdate
import pytest
from tinyweb.serve import RangeNotSatisfiable, StaticServer, parse_range

@pytest.mark.browser   # (also in Pyodide: the module imports there)
def test_parse_range():
  assert parse_range("bytes=0-7", 100) == (0, 8)
  assert parse_range("bytes=10-", 100) == (10, 100)
  assert parse_range("bytes=-30", 100) == (70, 100)
  assert parse_range("bytes=-300", 100) == (0, 100)           # a suffix longer than the file: all of it
  assert parse_range("bytes=90-1000", 100) == (90, 100)       # an end past the file: up to its end
  assert parse_range(" Bytes = 5 - 6 ", 100) == (5, 7)
  for ignored in ["bytes=0-1,5-6", "items=0-5", "bytes=9-3", "bytes=-", "bytes=a-b", "bytes=\u00b2-3", "0-5"]:
    assert parse_range(ignored, 100) is None, ignored   # (the whole file, 200)
  for unsatisfiable in ["bytes=100-", "bytes=100-200", "bytes=-0"]:
    with pytest.raises(RangeNotSatisfiable, match="100-byte file"): parse_range(unsatisfiable, 100)
  with pytest.raises(RangeNotSatisfiable, match="0-byte file"): parse_range("bytes=-5", 0)

@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("served")
  data = os.urandom(200_000)   # (longer than the server's 64 KiB copy chunk)
  (root / "data.bin").write_bytes(data)
  for name in ["m.wasm", "m.mjs", "m.js", "m.json", "tinyweb-0.1.0-py3-none-any.whl", "w.safetensors", "page.html", "pyodide.asm.wasm"]:
    (root / name).write_bytes(b"x" * 10)
  (root / "empty.txt").write_bytes(b"")
  (root / "site").mkdir()
  (root / "site" / "index.html").write_text("<!doctype html><title>index</title>")
  (root / "listing").mkdir()
  (root / "listing" / "a.txt").write_text("a")
  (tmp_path_factory.getbasetemp() / "outside.txt").write_text("secret")
  return root, data

def start(root, **kw) -> StaticServer:
  server = StaticServer(root, port=0, quiet=True, **kw)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  return server

@pytest.fixture(scope="module")
def server(files):
  s = start(files[0])
  yield s
  s.shutdown(); s.server_close()

def fetch(url: str, method: str = "GET", **headers) -> tuple[int, dict, bytes]:
  try:
    with urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers), timeout=30) as r:
      return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
  except urllib.error.HTTPError as e:
    return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

def test_whole_file_and_single_ranges(server, files):
  _, data = files
  url = server.url + "data.bin"
  status, h, body = fetch(url)
  assert (status, body, h["content-length"], h["accept-ranges"]) == (200, data, str(len(data)), "bytes")
  assert "content-range" not in h
  for rng, (start, end) in {"bytes=0-7": (0, 8), "bytes=1000-70000": (1000, 70001), "bytes=199990-": (199990, 200000),
                            "bytes=-100": (199900, 200000), "bytes=150000-999999": (150000, 200000)}.items():
    status, h, body = fetch(url, Range=rng)
    assert status == 206, rng
    assert h["content-range"] == f"bytes {start}-{end - 1}/{len(data)}", rng
    assert h["content-length"] == str(end - start) and body == data[start:end], rng
  status, h, body = fetch(url, Range="bytes=0-1,10-11")   # several ranges: the whole file, as HTTP allows
  assert (status, body) == (200, data)

def test_unsatisfiable_range_is_416_with_the_size(server, files):
  _, data = files
  for rng in ["bytes=200000-", "bytes=300000-300010", "bytes=-0"]:
    status, h, body = fetch(server.url + "data.bin", Range=rng)
    assert status == 416 and h["content-range"] == f"bytes */{len(data)}", (rng, status, h)
    assert b"200000-byte file" in body
  status, h, _ = fetch(server.url + "empty.txt", Range="bytes=0-")
  assert status == 416 and h["content-range"] == "bytes */0"

def test_head_sends_the_headers_only(server, files):
  _, data = files
  status, h, body = fetch(server.url + "data.bin", "HEAD")
  assert (status, h["content-length"], body) == (200, str(len(data)), b"")
  status, h, body = fetch(server.url + "data.bin", "HEAD", Range="bytes=100-199")
  assert (status, h["content-range"], h["content-length"], body) == (206, f"bytes 100-199/{len(data)}", "100", b"")
  status, h, body = fetch(server.url + "data.bin", "HEAD", Range="bytes=999999-")
  assert (status, h["content-range"], body) == (416, f"bytes */{len(data)}", b"")

def test_if_range_and_if_modified_since(server, files):
  root, data = files
  mtime = int(os.stat(root / "data.bin").st_mtime)
  current, older = formatdate(mtime, usegmt=True), formatdate(mtime - 3600, usegmt=True)
  assert fetch(server.url + "data.bin", Range="bytes=0-9", **{"If-Range": current})[0] == 206
  status, _, body = fetch(server.url + "data.bin", Range="bytes=0-9", **{"If-Range": older})   # changed since: all of it
  assert (status, body) == (200, data)
  status, h, body = fetch(server.url + "data.bin", **{"If-Modified-Since": current})
  assert (status, body, h["last-modified"]) == (304, b"", current)
  assert fetch(server.url + "data.bin", **{"If-Modified-Since": older})[0] == 200

def test_mime_types(server):
  want = {"m.wasm": "application/wasm", "pyodide.asm.wasm": "application/wasm", "m.mjs": "text/javascript",
          "m.js": "text/javascript", "m.json": "application/json", "tinyweb-0.1.0-py3-none-any.whl": "application/octet-stream",
          "w.safetensors": "application/octet-stream", "data.bin": "application/octet-stream",
          "page.html": "text/html; charset=utf-8"}
  got = {name: fetch(server.url + name, "HEAD")[1]["content-type"] for name in want}
  assert got == want
  assert fetch(server.url + "m.wasm", Range="bytes=0-1")[1]["content-type"] == "application/wasm"

def test_folders_missing_files_and_paths_outside(server):
  status, h, body = fetch(server.url + "site/")
  assert (status, h["content-type"], body) == (200, "text/html; charset=utf-8", b"<!doctype html><title>index</title>")
  assert fetch(server.url + "site/", Range="bytes=0-8")[2] == b"<!doctype"
  conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)   # (urllib would follow the redirect)
  conn.request("GET", "/site")
  r = conn.getresponse()
  assert (r.status, r.getheader("Location")) == (301, "/site/")
  conn.close()
  status, _, body = fetch(server.url + "listing/")
  assert status == 200 and b"a.txt" in body
  assert fetch(server.url + "nope.bin")[0] == 404
  assert fetch(server.url + "data.bin/")[0] == 404
  status, _, body = fetch(server.url + "%2e%2e/outside.txt")
  assert status == 404 and b"secret" not in body

def test_keep_alive_serves_several_requests_on_one_connection(server, files):
  _, data = files
  conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
  got = []
  for rng in ["bytes=0-7", "bytes=8-99", None, "bytes=-1"]:
    conn.request("GET", "/data.bin", headers={"Range": rng} if rng else {})
    r = conn.getresponse()
    got.append((r.status, r.read()))
  conn.close()
  assert got == [(206, data[:8]), (206, data[8:100]), (200, data), (206, data[-1:])]

def test_bytes_sent_counts_the_body_bytes_per_path(files):
  root, data = files
  s = start(root)
  try:
    fetch(s.url + "data.bin", Range="bytes=0-7")
    fetch(s.url + "data.bin", Range="bytes=100-1099")
    fetch(s.url + "data.bin", "HEAD")
    fetch(s.url + "data.bin", Range="bytes=999999-")   # (416: its short message is not file bytes)
    fetch(s.url + "m.json?v=1")
    assert dict(s.bytes_sent) == {"/data.bin": 8 + 1000, "/m.json": 10}
  finally: s.shutdown(); s.server_close()

def test_coop_coep_headers_only_when_asked(server, files):
  h = fetch(server.url + "m.js")[1]
  assert "cross-origin-opener-policy" not in h and "cross-origin-embedder-policy" not in h
  assert h["cache-control"] == "no-cache"
  s = start(files[0], coop_coep=True)
  try:
    for url, kw in [(s.url + "page.html", {}), (s.url + "data.bin", {"Range": "bytes=0-0"}), (s.url + "nope", {})]:
      h = fetch(url, **kw)[1]
      assert (h["cross-origin-opener-policy"], h["cross-origin-embedder-policy"]) == ("same-origin", "require-corp"), url
  finally: s.shutdown(); s.server_close()

def test_not_a_directory_is_refused(tmp_path):
  with pytest.raises(NotADirectoryError, match="nope is not a directory"): StaticServer(tmp_path / "nope", port=0)

def test_command_line(files):
  root, data = files
  p = subprocess.Popen([sys.executable, "-m", "tinyweb.serve", str(root), "--port", "0", "--coop-coep"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    line = p.stdout.readline()
    m = re.fullmatch(r"tinyweb\.serve: serving (.+) at (http://127\.0\.0\.1:\d+/) \(COOP/COEP: cross-origin isolated\)\n", line)
    assert m and os.path.samefile(m[1], root), line
    status, h, body = fetch(m[2] + "data.bin", Range="bytes=5-9")
    assert (status, body, h["cross-origin-embedder-policy"]) == (206, data[5:10], "require-corp")
    # a port in use: a clear error, exit status 1
    port = int(m[2].rsplit(":", 1)[1].rstrip("/"))
    busy = subprocess.run([sys.executable, "-m", "tinyweb.serve", str(root), "--port", str(port)], capture_output=True,
                          text=True, timeout=60)
    assert busy.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr and "--port" in busy.stderr, busy.stderr
  finally:
    p.terminate()
    _, err = p.communicate(timeout=30)
  assert '"GET /data.bin HTTP/1.1" 206' in err   # the access log on stderr
  bad = subprocess.run([sys.executable, "-m", "tinyweb.serve", str(root / "nope")], capture_output=True, text=True, timeout=60)
  assert bad.returncode == 2 and "nope is not a directory" in bad.stderr, bad.stderr

def test_ipv6_loopback(files):
  if not socket.has_ipv6: pytest.skip("no IPv6 on this machine")
  try: s = StaticServer(files[0], host="::1", port=0, quiet=True)
  except OSError as e: pytest.skip(f"cannot bind ::1 here: {e}")
  threading.Thread(target=s.serve_forever, daemon=True).start()
  try:
    assert s.url.startswith("http://[::1]:")
    assert fetch(s.url + "data.bin", Range="bytes=0-3")[2] == files[1][:4]
  finally: s.shutdown(); s.server_close()
