"""Test markers for the external tools some tests need (shared across test folders).

``needs_clang``: the Metal checks and emulator compile MSL with clang-19, which
``scripts/install_clang.sh`` installs (CI runs it); without it those tests skip and
say why, never fail.
"""

from __future__ import annotations

import pytest

from planner.lower.metal.emulator import clang_available

needs_clang = pytest.mark.skipif(
    not clang_available(),
    reason="clang-19 is not installed (scripts/install_clang.sh installs it; CI does)")
