"""Fault tests (issue #11): the SDK sandbox of the tracking tests, shared here."""

from tests.integration.local.conftest import phalanx  # noqa: F401  (a fixture)
from tests.support.sandbox import sandbox  # noqa: F401  (a fixture)
