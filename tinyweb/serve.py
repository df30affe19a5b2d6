"""A static file server for tinyweb's browser build and its weights: `python -m tinyweb.serve DIR [--port N] [--coop-coep]`.

What `python3 -m http.server` lacks and the browser host needs:
- HTTP Range requests (one range: `bytes=a-b`, `bytes=a-`, `bytes=-n`) answered with 206 and Content-Range, 416 with
  `Content-Range: bytes */size` when no byte of the range is in the file; `loadWeights(url, {tensors})` fetches only
  those tensors' bytes through them. Several ranges in one request get the whole file (200), as HTTP allows.
- The MIME types Pyodide and WebAssembly streaming want (.wasm application/wasm, .mjs/.js text/javascript, ...),
  the same on every machine (MIME_TYPES; only other extensions are looked up in the system's tables).
- `--coop-coep`: Cross-Origin-Opener-Policy / Cross-Origin-Embedder-Policy headers, which make the page cross-origin
  isolated (SharedArrayBuffer, threads in wasm).
- HTTP/1.1 keep-alive, `Cache-Control: no-cache` with Last-Modified (a browser revalidates and gets 304), HEAD.
It binds 127.0.0.1 by default: WebGPU needs a secure context, which http://127.0.0.1 and http://localhost are.
Standard library only; importing it runs nothing (it also imports in Pyodide, where it cannot serve).

In Python: `server = StaticServer("dist", port=0)` then `server.serve_forever()` (in a thread if needed); `server.url`
is where it listens; `server.bytes_sent[url_path]` counts the file bytes sent per path (of 200 and 206 responses
and folder listings; HEAD, 304, 416 and errors send none).
"""
from __future__ import annotations
import argparse, collections, datetime, email.utils, functools, os, re, socket, sys, threading, urllib.parse
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MIME_TYPES = {
  ".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
  ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm", ".json": "application/json",
  ".map": "application/json", ".txt": "text/plain; charset=utf-8", ".md": "text/markdown; charset=utf-8",
  ".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
  ".ico": "image/x-icon", ".zip": "application/zip", ".gz": "application/gzip",
  # model and package files: bytes the page reads itself
  ".whl": "application/octet-stream", ".safetensors": "application/octet-stream", ".bin": "application/octet-stream",
  ".onnx": "application/octet-stream", ".gguf": "application/octet-stream", ".pt": "application/octet-stream",
  ".pth": "application/octet-stream", ".npy": "application/octet-stream",
}
COOP_COEP = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}
CHUNK = 1 << 16

class RangeNotSatisfiable(ValueError):
  """A Range header none of whose bytes lie in the file (answered with 416)."""

_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.ASCII | re.IGNORECASE)

def parse_range(header: str, size: int) -> tuple[int, int] | None:
  """The bytes [start, end) that a `Range` header asks of a file of `size` bytes. None when the header is to be ignored
  (not one well-formed `bytes=` range, e.g. several ranges or last < first: HTTP then sends the whole file). Raises
  RangeNotSatisfiable when no byte of the range is in the file: it starts at or past the end, or it is a suffix of
  0 bytes or of an empty file."""
  m = _RANGE.fullmatch(header)
  if not m or m[1] == m[2] == "" or (m[1] and m[2] and int(m[2]) < int(m[1])): return None
  if m[1] == "":   # bytes=-n: the last n bytes
    if int(m[2]) == 0 or size == 0: raise RangeNotSatisfiable(f"{header.strip()} asks for the last bytes of a {size}-byte file")
    return max(0, size - int(m[2])), size
  start = int(m[1])
  if start >= size: raise RangeNotSatisfiable(f"{header.strip()} starts at or past the end of a {size}-byte file")
  return start, size if m[2] == "" else min(int(m[2]) + 1, size)

class StaticHandler(SimpleHTTPRequestHandler):
  """Files under the server's directory (index.html for a folder, else a listing), with Range support."""
  protocol_version = "HTTP/1.1"   # keep-alive: every response here has a Content-Length
  server: StaticServer

  def guess_type(self, path) -> str:
    return MIME_TYPES.get(os.path.splitext(str(path))[1].lower()) or super().guess_type(path)

  def send_head(self):
    self._span = None
    path = self.translate_path(self.path)
    if os.path.isdir(path):   # a folder: redirect to "folder/", its index.html, or a listing (as http.server does)
      index = os.path.join(path, "index.html")
      if not urllib.parse.urlsplit(self.path).path.endswith("/") or not os.path.isfile(index): return super().send_head()
      path = index
    if path.endswith("/") or not os.path.isfile(path):
      self.send_error(HTTPStatus.NOT_FOUND, "File not found")
      return None
    try: f = open(path, "rb")
    except OSError:
      self.send_error(HTTPStatus.NOT_FOUND, "File not found")
      return None
    try:
      st = os.fstat(f.fileno())
      size, last_modified = st.st_size, self.date_time_string(int(st.st_mtime))
      range_header = self.headers.get("Range")
      if range_header is not None and self.headers.get("If-Range", last_modified) != last_modified:
        range_header = None   # the file changed since the client's copy: the whole file
      try: span = parse_range(range_header, size) if range_header is not None else None
      except RangeNotSatisfiable as e:
        f.close()
        self._send_unsatisfiable(size, str(e))
        return None
      if span is None and range_header is None and self._not_modified(st.st_mtime):
        f.close()
        self.send_response(HTTPStatus.NOT_MODIFIED)
        self.send_header("Last-Modified", last_modified)
        self.end_headers()
        return None
      start, end = span or (0, size)
      self.send_response(HTTPStatus.PARTIAL_CONTENT if span else HTTPStatus.OK)
      self.send_header("Content-Type", self.guess_type(path))
      self.send_header("Content-Length", str(end - start))
      if span: self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
      self.send_header("Accept-Ranges", "bytes")
      self.send_header("Last-Modified", last_modified)
      self.end_headers()
      f.seek(start)
      self._span = end - start
      return f
    except BaseException:
      f.close()
      raise

  def _send_unsatisfiable(self, size: int, why: str):
    body = f"416 Range Not Satisfiable: {why}\n".encode()
    self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
    self.send_header("Content-Range", f"bytes */{size}")
    self.send_header("Content-Type", "text/plain; charset=utf-8")
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    if self.command != "HEAD": self._write(body, count=False)

  def _not_modified(self, mtime: float) -> bool:
    """If-Modified-Since says the client's copy is current (and no If-None-Match overrides it)."""
    if "If-Modified-Since" not in self.headers or "If-None-Match" in self.headers: return False
    try: since = email.utils.parsedate_to_datetime(self.headers["If-Modified-Since"])
    except (TypeError, IndexError, OverflowError, ValueError): return False
    if since.tzinfo is None: since = since.replace(tzinfo=datetime.timezone.utc)
    return datetime.datetime.fromtimestamp(int(mtime), datetime.timezone.utc) <= since

  def copyfile(self, source, outputfile):
    left = self._span
    while left is None or left > 0:
      chunk = source.read(CHUNK if left is None else min(CHUNK, left))
      if not chunk: break
      if not self._write(chunk): return
      if left is not None: left -= len(chunk)

  def _write(self, data: bytes, count: bool = True) -> bool:
    """Send body bytes (counted in server.bytes_sent when they are the file's); False when the client has gone (a page
    that cancelled a fetch)."""
    # counted before the write: a client that has read the whole body must find it counted (a test asks right after)
    path, n = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path), len(data) if count else 0
    self.server.count(path, n)
    try: self.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
      self.server.count(path, -n)
      self.close_connection = True
      return False
    return True

  def end_headers(self):
    self.send_header("Cache-Control", "no-cache")   # (revalidate: a rebuilt site is seen at once; 304 when unchanged)
    if self.server.coop_coep:
      for k, v in COOP_COEP.items(): self.send_header(k, v)
    super().end_headers()

  def log_message(self, format, *args):
    if not self.server.quiet: super().log_message(format, *args)

class StaticServer(ThreadingHTTPServer):
  """Serves `directory` on host:port (port 0: any free one) with `handler` (a StaticHandler subclass)."""
  def __init__(self, directory: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000, coop_coep: bool = False,
               quiet: bool = False, handler: type[StaticHandler] = StaticHandler):
    self.directory = Path(directory).resolve()
    if not self.directory.is_dir(): raise NotADirectoryError(f"tinyweb.serve: {directory} is not a directory")
    self.coop_coep, self.quiet = coop_coep, quiet
    self.bytes_sent: collections.Counter[str] = collections.Counter()   # URL path -> body bytes sent
    self._lock = threading.Lock()
    if ":" in host: self.address_family = socket.AF_INET6
    super().__init__((host, port), functools.partial(handler, directory=str(self.directory)))

  @property
  def url(self) -> str:
    host, port = self.server_address[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

  def count(self, path: str, n: int):
    if n:
      with self._lock: self.bytes_sent[path] += n

def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m tinyweb.serve", description="Serve a folder (a tinyweb site, weights) over "
                              "HTTP with Range requests, the MIME types WebAssembly needs and optional COOP/COEP headers.")
  p.add_argument("directory", nargs="?", default=".", help="the folder to serve (default: the current one)")
  p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: WebGPU needs a secure context, "
                 "which localhost is; 0.0.0.0 serves other machines too, over plain http)")
  p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port, printed)")
  p.add_argument("--coop-coep", action="store_true", help="send Cross-Origin-Opener-Policy: same-origin and "
                 "Cross-Origin-Embedder-Policy: require-corp (cross-origin isolation)")
  p.add_argument("--quiet", action="store_true", help="no access log on stderr")
  args = p.parse_args(argv)
  if not os.path.isdir(args.directory): p.error(f"{args.directory} is not a directory")
  if not 0 <= args.port <= 65535: p.error(f"--port {args.port} is not a port number (0-65535)")
  try: server = StaticServer(args.directory, args.host, args.port, args.coop_coep, args.quiet)
  except OSError as e:
    print(f"tinyweb.serve: cannot listen on {args.host}:{args.port}: {e.strerror or e}"
          + (" (choose another --port; 0 picks a free one)" if args.port else ""), file=sys.stderr)
    return 1
  print(f"tinyweb.serve: serving {server.directory} at {server.url}" + (" (COOP/COEP: cross-origin isolated)" if args.coop_coep else ""),
        flush=True)
  with server:
    try: server.serve_forever()
    except KeyboardInterrupt: pass
  return 0

if __name__ == "__main__": sys.exit(main())
