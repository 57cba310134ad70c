"""``python -m seqloader``: the same command line as the ``seqloader`` console script."""

from seqloader.cli.main import main

raise SystemExit(main())
