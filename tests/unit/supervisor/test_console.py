"""Console: every replica's lines reach the terminal and the spool, the supervisor's own notes land
after what the replica printed before them, and lines the spool cannot take are counted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.domain import Replica, Role
from phalanx.spool import SpoolWriter
from phalanx.supervisor.console import Console
from phalanx.supervisor.liveness import Liveness
from tests.unit.supervisor.fakes import FakeObserver, spooled

REPLICAS = {
    "master": Replica("e1", "master", Role.MASTER, 0, 0),
    "worker-0": Replica("e1", "worker-0", Role.WORKER, 0, 1),
}


@pytest.fixture
def spool(tmp_path: Path) -> Iterator[SpoolWriter]:
    writer = SpoolWriter(tmp_path / "spool", experiment_id="e1", stream="console")
    yield writer
    writer.close()


def logs(name: str) -> Iterator[str]:
    yield from (f"{name} says {i}" for i in range(3))


def test_every_replicas_lines_reach_the_terminal_and_the_spool(
    spool: SpoolWriter, observer: FakeObserver
) -> None:
    console = Console(spool, observer, REPLICAS)
    console.follow(logs)
    console.join()
    console.flush()
    for name in REPLICAS:
        said = [f"{name} says {i}" for i in range(3)]
        assert [t for r, t in observer.lines if r == name] == said
        lines = [
            line
            for rec in spooled(spool.spool_dir, "log")
            if rec["replica"] == name
            for line in rec["data"]["lines"]
        ]
        assert lines == said
    assert console.last_lines("worker-0") == ["worker-0 says 0", "worker-0 says 1", "worker-0 says 2"]
    assert console.last_lines("nobody") == [] and console.lost == 0


class ShownCount(FakeObserver):
    """Sets ``enough`` once ``n`` replica lines were shown."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.enough = threading.Event()

    def line(self, replica: str, text: str) -> None:
        super().line(replica, text)
        if len(self.lines) >= self.n:
            self.enough.set()


def test_a_note_lands_after_what_the_replica_printed_before_it(spool: SpoolWriter) -> None:
    """The replicas' lines wait in their tail's batch until the next poll; a note flushes them first."""
    observer = ShownCount(6)
    release = threading.Event()

    def still_running(name: str) -> Iterator[str]:
        yield from logs(name)
        release.wait(timeout=30)  # the replica runs on, printing nothing more

    console = Console(spool, observer, REPLICAS)
    console.follow(still_running)
    try:
        assert observer.enough.wait(timeout=30)
        assert spooled(spool.spool_dir, "log") == []  # taken and shown, not spooled yet
        console.emit_all("phalanx: restarting the group (1/1)")
        for name in REPLICAS:
            lines = [
                line
                for rec in spooled(spool.spool_dir, "log")
                if rec["replica"] == name
                for line in rec["data"]["lines"]
            ]
            assert lines == [f"{name} says {i}" for i in range(3)] + ["phalanx: restarting the group (1/1)"]
    finally:
        release.set()
        console.join()
    assert observer.lines[-1] == ("worker-0", "phalanx: restarting the group (1/1)")


def test_a_note_of_several_lines_is_as_many_console_lines_of_the_replica(
    spool: SpoolWriter, observer: FakeObserver
) -> None:
    """A restart's reason quotes the replica's last lines: stored as one line, `phalanx logs` printed
    them without the replica's name, as if the job had printed them."""
    console = Console(spool, observer, REPLICAS)
    console.line(REPLICAS["master"], "phalanx: restarting after: exit 1; last lines:\n  Traceback\n  Boom\n")
    expected = ["phalanx: restarting after: exit 1; last lines:", "  Traceback", "  Boom"]
    assert [line for rec in spooled(spool.spool_dir, "log") for line in rec["data"]["lines"]] == expected
    assert observer.lines == [("master", text) for text in expected]


def test_lines_the_spool_cannot_take_are_counted_and_still_shown(
    spool: SpoolWriter, observer: FakeObserver
) -> None:
    console = Console(spool, observer, REPLICAS)
    spool.close()  # as at shutdown, under a late line
    console.line(REPLICAS["master"], "late")
    assert console.lost == 1 and observer.lines == [("master", "late")]


def test_output_is_progress_for_the_hang_check(spool: SpoolWriter, observer: FakeObserver) -> None:
    liveness = Liveness(timeout=60)
    Console(spool, observer, REPLICAS, liveness).show(REPLICAS["worker-0"], "step 3")
    assert set(liveness.last_progress) == {"worker-0"}


def test_the_launch_params_are_tracked_params_of_rank_0(spool: SpoolWriter, observer: FakeObserver) -> None:
    console = Console(spool, observer, {"worker-0": REPLICAS["worker-0"], "master": REPLICAS["master"]})
    console.record_params("Trial", {"lr": 0.1, "layers": [64, 32], "name": None})
    (record,) = spooled(spool.spool_dir, "param")
    assert record["replica"] == "master"
    assert record["data"] == {"section": "Trial", "values": {"lr": 0.1, "layers": "[64, 32]", "name": None}}


def test_a_failures_last_lines_are_its_last_however_slowly_its_reader_reaches_them(
    spool: SpoolWriter, observer: FakeObserver
) -> None:
    """The reason of a failed experiment quotes the culprit's last lines. On a loaded machine its
    log reader took longer than the fixed 5 seconds it was given, and the reason quoted lines from
    before the traceback; a reader still making progress is waited for."""
    said = [f"epoch {i}" for i in range(21)] + ["Traceback: the last words"]

    def slow(name: str) -> Iterator[str]:
        for line in said if name == "worker-0" else []:
            time.sleep(0.25)  # 5.5 s in all, each line a step forward
            yield line

    console = Console(spool, observer, REPLICAS)
    console.follow(slow)
    assert console.last_lines("worker-0") == said[-10:]
    console.join()
