"""A build's progress in the experiment's console: pip's lines as they come, a heartbeat with the
elapsed time and pip's last line whenever pip is silent for 30 s (a clock of the test's own), and
the lines in the store under the source ``build`` while the build runs, exactly once."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.buildprogress import HEARTBEAT_SECONDS, BuildProgress
from phalanx.config import Settings
from phalanx.domain import BUILD_CONSOLE, ExperimentStatus, Replica, Role, console_sources
from phalanx.ingest import Ingester
from phalanx.runner.buildconsole import BuildConsole
from phalanx.runs import Run
from phalanx.spool import SpoolWriter
from phalanx.store import open_store
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.sql import SqlStore
from tests.support.clock import ManualClock


def test_pip_lines_pass_as_they_come_and_a_silence_gets_a_heartbeat_every_30_seconds() -> None:
    clock, said = ManualClock(), []
    progress = BuildProgress(said.append, clock)
    progress.step("pip install of build.pip_packages")
    clock.now += 2
    progress.output("Collecting tensorflow-cpu==2.16.1\n\n  Downloading tensorflow_cpu-2.16.1.whl (230 MB)\n")
    assert said == [
        ["pip install of build.pip_packages (0 s in)"],
        ["Collecting tensorflow-cpu==2.16.1", "  Downloading tensorflow_cpu-2.16.1.whl (230 MB)"],
    ]
    clock.now += HEARTBEAT_SECONDS - 1  # silent, but not for long yet
    progress.tick()
    assert len(said) == 2
    clock.now += 1  # 30 s since pip's last line
    progress.tick()
    assert said[-1] == [
        "still building (32 s): pip install of build.pip_packages; "
        "pip's last line: Downloading tensorflow_cpu-2.16.1.whl (230 MB)"
    ]
    progress.tick()  # the heartbeat itself counts as a line: the next one comes 30 s later
    assert len(said) == 3
    clock.now += HEARTBEAT_SECONDS
    progress.tick()
    assert said[-1][0].startswith("still building (62 s)")


def test_a_heartbeat_before_pip_says_anything_names_the_step() -> None:
    clock, said = ManualClock(), []
    progress = BuildProgress(said.append, clock, every=30.0)
    clock.now += 30
    progress.tick()
    assert said == [["still building (30 s): starting"]]


def test_the_build_source_is_read_first_and_only_once() -> None:
    assert console_sources(["master", "worker-0"]) == [BUILD_CONSOLE, "master", "worker-0"]
    assert console_sources([BUILD_CONSOLE, "master"]) == [BUILD_CONSOLE, "master"]


class Terminal:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def line(self, replica: str, text: str) -> None:
        self.lines.append((replica, text))

    def states(self, replicas: object, elapsed: float) -> None:
        return None

    def message(self, text: str) -> None:
        return None

    def flush(self) -> None:
        return None


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    s = SqlStore(f"sqlite:///{tmp_path / 'phalanx.db'}", ArtifactStore(str(tmp_path / "artifacts")))
    yield s
    s.close()


def test_build_lines_are_in_the_store_while_it_builds_once_and_the_spool_is_tidied(
    store: SqlStore, tmp_path: Path
) -> None:
    exp = store.create_experiment(name="e", project="default", status=ExperimentStatus.BUILDING)
    spool = tmp_path / "spool" / exp.id
    terminal = Terminal()
    console = BuildConsole(exp.id, terminal, store, spool)
    console.progress.output("Collecting tinypkg\nSuccessfully installed tinypkg-1.0\n")
    # readable now, before the build ends: no supervisor's ingester runs yet
    texts = [line.text for line in store.logs(exp.id, replica=BUILD_CONSOLE)]
    assert texts == ["Collecting tinypkg", "Successfully installed tinypkg-1.0"]
    assert terminal.lines == [(BUILD_CONSOLE, t) for t in texts]
    console.progress.note("environment ready in 3 s")
    Ingester(store, None, spool).run_once()  # another reader's pass stores nothing twice
    console.close()
    Ingester(store, None, spool).run_once()
    texts = [line.text for line in store.logs(exp.id, replica=BUILD_CONSOLE)]
    assert texts == ["Collecting tinypkg", "Successfully installed tinypkg-1.0", "environment ready in 3 s"]
    assert list(spool.glob("*.spool")) == []  # the store's copy is the one kept


def test_wait_for_completion_shows_the_build_before_the_replicas(phalanx_home: Path) -> None:
    """``run.wait_for_completion(show_output=True)``: the build's lines, then the replicas'."""
    settings = Settings()
    store = open_store(settings)
    exp = store.create_experiment(
        name="e",
        project="default",
        experiment_id="e1",
        status=ExperimentStatus.BUILDING,
        replicas=[Replica("e1", "master", Role.MASTER, 0, 0)],
    )
    console = BuildConsole(exp.id, None, store, settings.spool_dir / exp.id)
    console.progress.output("Successfully installed tinypkg-1.0\n")
    console.close()
    replica = SpoolWriter(settings.spool_dir / exp.id, experiment_id=exp.id)
    replica.log("epoch 1\n")
    replica.close()
    Ingester(store, None, settings.spool_dir / exp.id).run_once()
    store.update_experiment(exp.id, status=ExperimentStatus.SUCCEEDED, finished_at=time.time())
    out = io.StringIO()
    Run(exp.id, settings=settings).wait_for_completion(show_output=True, output=out)
    assert out.getvalue() == "[build] Successfully installed tinypkg-1.0\n[master] epoch 1\n"
