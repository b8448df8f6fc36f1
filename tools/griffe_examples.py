"""A griffe extension for the docs build: read Google-style ``Example:`` sections as examples.

xaikit's docstrings use the singular ``Example:`` heading (the brief's habit); griffe only knows
the plural ``Examples:`` and would render the doctest lines as Markdown quotes. This rewrites the
heading before the docstring is parsed; the source files are left alone.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


class SingularExamples(griffe.Extension):
    """Turn ``Example:`` headings into ``Examples:`` in every docstring."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and "Example:" in obj.docstring.value:
            obj.docstring.value = _HEADING.sub(r"\1Examples:", obj.docstring.value)
