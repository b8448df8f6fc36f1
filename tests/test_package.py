"""Package-level promises: cheap import, lazy frameworks, curated public names."""

from __future__ import annotations

import subprocess
import sys

import pytest

import xaikit
from xaikit.errors import MissingFrameworkError, XaikitError, XaikitTypeError, XaikitValueError, describe


def test_missing_framework_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "from xaikit.backend import load_backend\n"
        "from xaikit.errors import MissingFrameworkError\n"
        "try:\n"
        "    load_backend('torch')\n"
        "except MissingFrameworkError as e:\n"
        "    assert 'pip install \"xaikit[torch]\"' in str(e), str(e)\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_error_hierarchy() -> None:
    assert issubclass(XaikitValueError, ValueError) and issubclass(XaikitValueError, XaikitError)
    assert issubclass(XaikitTypeError, TypeError) and issubclass(XaikitTypeError, XaikitError)
    assert issubclass(MissingFrameworkError, ImportError)
    assert describe(None) == "NoneType None"


def test_all_is_sorted_and_resolvable() -> None:
    assert list(xaikit.__all__) == sorted(xaikit.__all__)
    with pytest.raises(AttributeError):
        _ = xaikit.no_such_thing
