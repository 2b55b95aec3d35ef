"""Where the tests find the repository's files, wherever in tests/ a test file sits."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
