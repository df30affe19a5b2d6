"""The `tinyweb` command (a console script of the package; in a checkout: `python -m tinyweb.cli`):
  tinyweb devices                every device, whether it works here (if not, why), the default device and why
  tinyweb serve [DIR] [...]      serve a folder over HTTP for the browser (tinyweb.serve)
  tinyweb export MODEL OUT [...] export a model for static hosting (tinyweb.export)
  tinyweb viz [...]              the visualizer (tinyweb.viz)
  tinyweb --version
Every command but `devices` hands the rest of the command line to its module's main(argv) untouched, so
`tinyweb export --help` is the export command's own help."""
import argparse, importlib, sys
from typing import Optional
from tinyweb import __version__

# command -> (the module whose main(argv) runs it, one line of help)
DELEGATED = {
  "serve": ("tinyweb.serve", "serve a folder (a built site, exported models, weights) over HTTP on 127.0.0.1, with Range "
                             "requests and optional COOP/COEP headers"),
  "export": ("tinyweb.export.cli", "export a model of tinyweb.models for static hosting (WGSL kernels, manifest.json, "
                                   "safetensors weights), to run with loadModel (npm tinyweb/model)"),
  "viz": ("tinyweb.viz", "the visualizer"),
}

def main(argv: Optional[list[str]] = None) -> int:
  parser = argparse.ArgumentParser(prog="tinyweb", description="tinyweb's command line; `tinyweb COMMAND --help` for a "
                                   "command's options.")
  parser.add_argument("--version", action="version", version=f"tinyweb {__version__}")
  commands = parser.add_subparsers(dest="command", metavar="COMMAND")
  commands.add_parser("devices", help="list every device: whether it works here (if not, why), the default and why",
                      description="Every device tinyweb knows: whether it works here and, if not, why; then the default "
                      "device ($DEV overrides it) and why it is the default.")
  for name, (_, help) in DELEGATED.items():
    # (prefix_chars: no argument starts with "\0", so nothing after the command is an option of this parser: all of it,
    # --help too, goes to the module's own parser)
    commands.add_parser(name, help=help, add_help=False, prefix_chars="\0").add_argument("args", nargs=argparse.REMAINDER)
  args = parser.parse_args(argv)
  if args.command is None:
    parser.print_help(sys.stderr)
    return 2
  if args.command == "devices":
    from tinyweb.devices import report
    print(report())
    return 0
  return importlib.import_module(DELEGATED[args.command][0]).main(args.args) or 0

if __name__ == "__main__": sys.exit(main())
