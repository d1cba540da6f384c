"""Fixtures every test may use. Each test gets its own PHALANX_HOME, so nothing leaks between tests
or into the user's ~/.phalanx."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from xdist.scheduler import LoadScopeScheduling

# Everywhere: no per-example deadline and no "too slow" health check. Hypothesis's defaults (200 ms
# an example; fail when drawing examples is slow) turn a busy machine into a red test ("Unreliable
# test timings", FailedHealthCheck) that says nothing about the code; a test that cares about time
# measures it itself.
_UNTIMED: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
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


# ---- Ctrl-C as a terminal delivers it ---------------------------------------------------------------
@pytest.fixture(autouse=True)
def _sigint_as_it_was() -> Iterator[None]:
    """Put back this process's SIGINT handler after each test. Code a test runs in-process (a
    supervisor, a group controller) installs its own, and a handler or an ignored SIGINT left behind
    is inherited by every process later tests start: a `phalanx run --follow` that ignores Ctrl-C
    made a later test wait for it in vain."""
    before = signal.getsignal(signal.SIGINT)
    yield
    if before is not None and signal.getsignal(signal.SIGINT) is not before:
        signal.signal(signal.SIGINT, before)


# ---- nothing left behind ------------------------------------------------------------------------
_LEFT_BEHIND: list[str] = []


_MARKS = (b"PHALANX_HOME=", b"PHALANX_BOX=", b"PHALANX_SERVICE=")


def _processes_under(root: Path) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose PHALANX_HOME lies under ``root``: every experiment,
    supervisor, ingester and server a test starts has one under its tmp_path. A boxed replica (a
    server's submission) has no PHALANX_HOME: its mark PHALANX_BOX names its box folder, which lies
    in the server's home; a server's service (TensorBoard) is marked PHALANX_SERVICE the same way."""
    prefix = str(root).encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
            homes = [v.split(b"=", 1)[1] for v in environ if v.startswith(_MARKS)]
            if not any(home.startswith(prefix) for home in homes):
                continue
            if Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError):
            continue
        found.append((int(entry.name), cmdline.decode(errors="replace").strip()))
    return found


@pytest.fixture(scope="session", autouse=True)
def _no_process_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the session's end, kill any process a test left running under the session's temp folder
    (a failed or timed-out test skips its own clean-up) and name it in the summary: a CI machine
    must not carry a test's `sleep 600` into the next job."""
    yield
    if not Path("/proc").is_dir():
        return
    import signal

    for pid, cmdline in _processes_under(tmp_path_factory.getbasetemp()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            _LEFT_BEHIND.append(f"{pid}: {cmdline[:200]}")


# ---- two workers (`make test`: pytest-xdist, `-n 2`) -----------------------------------------------
# A worker takes a whole file at a time, so a module's or a session's fixtures (a filled store and
# its server, a browser) are made once per file, as in a serial run. The Slurm and the Ray cluster
# are one per machine: every test of the folders that use one (their daemons' ports and state are
# fixed) runs on the same worker, one after the other. (xdist's own `--dist loadgroup` would read
# `xdist_group` marks, but with pytest 9 it renames the wrong attribute and groups nothing.)
_ONE_PER_MACHINE = {
    "tests/integration/slurm/": "slurm",
    "tests/integration/isolation/": "slurm",  # its server's Slurm target is the same cluster
    "tests/integration/ray/": "ray",
}


class OneClusterScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist.scheduler: untyped
    """xdist's per-file scheduling, with each cluster's folders as one scope."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return next((g for folder, g in _ONE_PER_MACHINE.items() if path.startswith(folder)), path)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> OneClusterScheduling:
    return OneClusterScheduling(config, log)


def pytest_itemcollected(item: pytest.Item) -> None:
    """schemathesis 4 names each API operation's test ``test[GET /api/v1/health]`` but gives pytest 9
    the bare test's node id, so the 78 operations of a test share one id; xdist deals tests out by
    id and ran one operation of each. Each gets the id its name says."""
    if item.parent is not None and not item.nodeid.endswith(item.name):
        item._id = item.parent.id.child(item.name)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _LEFT_BEHIND:
        terminalreporter.section("processes left behind by tests (killed at the session's end)")
        for line in _LEFT_BEHIND:
            terminalreporter.write_line(line)
