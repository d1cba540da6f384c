"""Fault tests (issue #11): the SDK sandbox of the tracking tests, shared here."""

from tests.integration.local.conftest import phalanx  # noqa: F401  (a fixture)
from tests.unit.tracking.conftest import sandbox  # noqa: F401  (a fixture)
