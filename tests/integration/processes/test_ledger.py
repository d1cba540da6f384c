"""The machine's ledger: all-or-nothing admission, queue order, reservations, reclaiming the dead.

The entries belong to real processes (`sleep`), so "alive" is what /proc says, as in production.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.machine import ledger as ledger_mod
from phalanx.machine.ledger import Capacity, Ledger, Need, NeverFits, NoRoom

FOUR = Capacity(cpus=(0, 1, 2, 3), gpus=("0",), memory_mib=1000.0)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.json")


@pytest.fixture
def owners() -> Iterator[list[int]]:
    """Pids of live processes to own entries (each experiment's `phalanx run`)."""
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def test_a_topology_that_fits_is_granted_disjoint_cores(ledger: Ledger, owners: list[int]) -> None:
    a, _ = ledger.admit("a", Need(cpus=2), FOUR, pid=owners[0])
    b, _ = ledger.admit("b", Need(cpus=2, gpus=1), FOUR, pid=owners[1])
    assert a is not None and b is not None
    assert set(a.cpus).isdisjoint(b.cpus) and len(a.cpus + b.cpus) == 4
    assert b.gpus == ("0",)
    c, _ = ledger.admit("c", Need(cpus=1), FOUR, pid=owners[2])
    assert c is None  # all or nothing: it waits
    holding, waiting, _ = ledger.snapshot()
    assert [e.experiment_id for e in holding] == ["a", "b"]
    assert [e.experiment_id for e in waiting] == ["c"]
    ledger.release("a")
    c, _ = ledger.admit("c", Need(cpus=1), FOUR, pid=owners[2])
    assert c is not None and c.cpus[0] in a.cpus


def test_higher_priority_goes_first_and_ties_keep_arrival_order(ledger: Ledger, owners: list[int]) -> None:
    ledger.admit("big", Need(cpus=4), FOUR, pid=owners[0])
    for name, prio in (("low", 0), ("high", 5), ("low2", 0), ("mid", 2)):
        assert ledger.admit(name, Need(cpus=4), FOUR, pid=owners[1], priority=prio)[0] is None
    assert [e.experiment_id for e in ledger.snapshot()[1]] == ["high", "mid", "low", "low2"]
    ledger.release("big")
    # the head is owed the machine: nobody behind it may start first, even if it asks first
    assert ledger.admit("low", Need(cpus=4), FOUR, pid=owners[1])[0] is None
    assert ledger.admit("high", Need(cpus=4), FOUR, pid=owners[1])[0] is not None


def test_the_head_of_the_queue_keeps_what_it_needs_from_smaller_latecomers(
    ledger: Ledger, owners: list[int]
) -> None:
    ledger.admit("running", Need(cpus=3), FOUR, pid=owners[0])
    assert ledger.admit("large", Need(cpus=4), FOUR, pid=owners[1])[0] is None
    # one core is free, but the large one waiting ahead needs it: the small one must not take it
    assert ledger.admit("small", Need(cpus=1), FOUR, pid=owners[2])[0] is None
    # a need the head does not share (memory only) may go beside it
    assert ledger.admit("memory-only", Need(memory_mib=100), FOUR, pid=owners[3])[0] is not None
    ledger.release("running")
    assert ledger.admit("small", Need(cpus=1), FOUR, pid=owners[2])[0] is None
    assert ledger.admit("large", Need(cpus=4), FOUR, pid=owners[1])[0] is not None


def test_aging_lifts_a_long_waiting_experiment_above_newer_higher_priority_ones(
    ledger: Ledger, owners: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger.admit("running", Need(cpus=4), FOUR, pid=owners[0])
    ledger.admit("old", Need(cpus=4), FOUR, pid=owners[1], priority=0)
    later = time.time() + 2.5 * ledger_mod.AGING_SECONDS
    monkeypatch.setattr(ledger_mod.time, "time", lambda: later)
    ledger.admit("new", Need(cpus=4), FOUR, pid=owners[2], priority=1)
    assert [e.experiment_id for e in ledger.snapshot()[1]] == ["old", "new"]


def test_entries_of_dead_processes_are_reclaimed(ledger: Ledger, owners: list[int]) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    ledger.admit("gone", Need(cpus=4), FOUR, pid=owners[0])
    # forge an entry for a pid that no longer runs, and one whose pid was reused (other start time)
    with ledger.locked() as state:
        e = state.entries["gone"]
        state.entries["gone"] = ledger_mod.Entry(**{**e.__dict__, "pid": dead.pid})
        state.entries["reused"] = ledger_mod.Entry(
            "reused", owners[1], "1", Need(cpus=1), seq=99, since=time.time()
        )
    grant, reclaimed = ledger.admit("next", Need(cpus=4), FOUR, pid=owners[2])
    assert grant is not None
    assert sorted(e.experiment_id for e in reclaimed) == ["gone", "reused"]


def test_no_wait_says_what_is_busy_and_by_whom(ledger: Ledger, owners: list[int]) -> None:
    ledger.admit("abc123", Need(cpus=3), FOUR, pid=owners[0], name="train")
    with pytest.raises(NoRoom) as err:
        ledger.admit("mine", Need(cpus=2), FOUR, pid=owners[1], wait=False)
    text = str(err.value)
    assert "needs 2 cores" in text and "1 of 4 cores" in text
    assert "abc123 (train)" in text and f"pid {owners[0]}" in text and "cores 0,1,2" in text
    assert [e.experiment_id for e in ledger.snapshot()[1]] == []  # not queued


def test_a_need_larger_than_the_machine_never_fits(ledger: Ledger) -> None:
    with pytest.raises(NeverFits, match="5 cores"):
        ledger.admit("x", Need(cpus=5), FOUR)
    with pytest.raises(NeverFits, match="2 GPUs"):
        ledger.admit("x", Need(gpus=2), FOUR)


def _grab(path: str, name: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    led = Ledger(path)
    while True:
        grant, _ = led.admit(name, Need(cpus=1), FOUR)
        if grant is not None:
            break
        time.sleep(0.01)
    with led.locked() as state:  # what every holder holds at this moment, read under the lock
        out.put([list(e.cpus) for e in state.entries.values() if e.holding])
    time.sleep(0.05)
    led.release(name)


def test_concurrent_processes_never_share_a_core(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.json")
    out: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_grab, args=(path, f"e{i}", out)) for i in range(10)]
    for p in procs:
        p.start()
    seen = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    for held in seen:
        flat = [c for cpus in held for c in cpus]
        assert len(flat) == len(set(flat)) and len(held) <= 4
    assert Ledger(path).snapshot()[:2] == ([], [])


def test_the_queue_counts_cpu_limits_and_its_refusal_names_them(tmp_path: Path) -> None:
    from phalanx.domain import Range, Resources

    seed = Resources(cpu=Range(requests=1, limits=3))
    need = ledger_mod.need_of([(seed, 1), (seed, 1)])
    assert need.cpus == 6 and "cores from the cpu limits" in need.counted
    with pytest.raises(NeverFits, match="counted: cores from the cpu limits"):
        Ledger(tmp_path / "ledger.json").admit("a", need, FOUR)
    only_request = ledger_mod.need_of([(Resources(cpu=Range(requests=2)), 1)])
    assert only_request.cpus == 2 and "cpu requests" in only_request.counted
