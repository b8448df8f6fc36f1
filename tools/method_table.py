"""Write the table of every explanation method into ``docs/methods.md``, from the method records.

The table sits between ``<!-- method_table -->`` and ``<!-- /method_table -->`` in the page:
one row per registered method (:func:`xaikit.xai.method_names`, by family) with its name and the
other names it goes by, its title, family, what it answers (``summary``), its options with their
defaults, its cost class (gradients or forward passes only), the shape of its result, whether it
reports the completeness delta, and the paper it follows. Nothing in the table is written by
hand, so it cannot drift from the code: ``tests/test_method_table.py`` fails when the committed
table differs from what the records give.

Usage (from the repository root)::

    python tools/method_table.py           # rewrite the table in docs/methods.md
    python tools/method_table.py --check   # exit 1 when the page's table is out of date

``make docs`` runs the first before building the site.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "methods.md"
HEAD, TAIL = "<!-- method_table -->", "<!-- /method_table -->"
#: what a stale table's reader (or the failing test) is told to run
REGENERATE = "python tools/method_table.py (or make docs)"


def _cell(text: str) -> str:
    """Text as a Markdown table cell (a ``|`` would end the cell)."""
    return text.replace("|", "\\|").replace("\n", " ")


def _reference(text: str) -> str:
    """``"Author et al., 2017, https://..."`` as a link; a reference without an address as is."""
    label, sep, url = text.rpartition(", ")
    if sep and url.startswith(("http://", "https://")):
        return f"[{_cell(label)}]({url})"
    return _cell(text) or "—"


def table() -> str:
    """The Markdown table of every registered method, from the records."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from xaikit.xai import get_method, method_names

    lines = [
        f"<!-- written by tools/method_table.py from the method records; to change it, change a "
        f"record and run {REGENERATE} -->",
        "",
        "| method | family | what it answers | options (`name=default`; `name` alone: the method "
        "chooses) | cost | result | delta | reference |",
        "|---|---|---|---|---|---|:-:|---|",
    ]
    for name in method_names():
        m = get_method(name)
        names = f"`{m.name}` ({_cell(m.title)})"
        if m.aliases:
            names += "<br>also " + ", ".join(f"`{_cell(a)}`" for a in m.aliases)
        options = ", ".join(f"`{_cell(o)}`" for o in m.option_texts()) or "—"
        result = "x's shape" if m.result == "input" else "(B, H, W)"
        row = [
            names,
            m.family,
            _cell(m.summary) or "—",
            options,
            m.cost,
            result,
            "✓" if m.delta else "",
            _reference(m.reference),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def render(page: str, text: str) -> str:
    """``page`` with ``text`` between the markers (which must be there, once each)."""
    if page.count(HEAD) != 1 or page.count(TAIL) != 1 or page.index(HEAD) > page.index(TAIL):
        raise SystemExit(f"{PAGE}: expected one {HEAD} ... {TAIL} pair to write the method table between")
    before, rest = page.split(HEAD, 1)
    _, after = rest.split(TAIL, 1)
    return f"{before}{HEAD}\n{text.strip()}\n{TAIL}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write the method table of docs/methods.md from the records."
    )
    parser.add_argument("--check", action="store_true", help="only check that the page's table is up to date")
    args = parser.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    new = render(page, table())
    if args.check:
        if new != page:
            print(f"{PAGE} has an out-of-date method table: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    if new != page:
        from xaikit.files import write_text

        write_text(PAGE, new)
        print(f"wrote the method table of {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
