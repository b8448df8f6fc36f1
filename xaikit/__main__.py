"""``python -m xaikit demo`` runs the command line of :mod:`xaikit.cli`."""

from xaikit.cli import main

raise SystemExit(main())
