"""``python -m xaikit demo`` runs the command line of :mod:`xaikit.cli`."""

from xaikit.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
