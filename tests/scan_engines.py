"""The engines the log parsers' marker scans run on, for tests parametrized over both.

Hyperscan where its wheel installs, else numpy: the fast-path tests run on both, so the
fallback stays right on the platforms that need it.
"""

from __future__ import annotations

import importlib.util

import pytest

ENGINES = [
    "numpy",
    pytest.param(
        "hyperscan",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("hyperscan") is None, reason="hyperscan not installed"
        ),
    ),
]
