"""`python -m tinyweb.export MODEL OUT_DIR`: see tinyweb/export/cli.py."""
from tinyweb.export.cli import main

raise SystemExit(main())
