"""The SDK tests run scripts as real processes (tests/support/sandbox.py)."""

from tests.support.sandbox import sandbox  # noqa: F401  (a fixture)
