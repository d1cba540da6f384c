"""Fixtures every test may use. Each test gets its own PHALANX_HOME, so nothing leaks between tests
or into the user's ~/.phalanx."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Everywhere: no per-example deadline and no "too slow" health check. Hypothesis's defaults (200 ms
# an example; fail when drawing examples is slow) turn a busy machine into a red test ("Unreliable
# test timings", FailedHealthCheck) that says nothing about the code; a test that cares about time
# measures it itself.
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("untimed", **_UNTIMED)
# In CI the property-based tests (the spec's, schemathesis's) draw the same examples every run, so a
# red CI always means a regression; locally they keep exploring new ones.
settings.register_profile("ci", derandomize=True, database=None, **_UNTIMED)
settings.load_profile("ci" if os.environ.get("CI") else "untimed")

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "corpus"  # real-world files, copied in with their sources and licences
OUTPUT = REPO / "test-output"  # screenshots and other artefacts worth keeping from a run


@pytest.fixture
def phalanx_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "phalanx-home"
    home.mkdir()
    monkeypatch.setenv("PHALANX_HOME", str(home))
    for var in ("PHALANX_DB_URL", "PHALANX_HOST", "PHALANX_TOKEN", "PHALANX_ARTIFACTS_URL"):
        monkeypatch.delenv(var, raising=False)
    for var in [v for v in os.environ if v.startswith("PHALANX_") and v != "PHALANX_HOME"]:
        monkeypatch.delenv(var, raising=False)
    yield home
