"""A notebook's seat in the machine's ledger: the cores, GPUs and memory its file asks for, taken
whole while it runs, said at once when there is no room, and given back when it stops; and its
kernels' build environment (ipykernel added, the kernel named for Jupyter)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest

from phalanx.domain import Range, Resources
from phalanx.errors import Conflict, UsageError
from phalanx.machine import cgroups
from phalanx.machine.cgroups import Cgroup
from phalanx.machine.ledger import Grant, Ledger
from phalanx.services.kernels import kernel_build, write_kernel
from phalanx.services.seats import Seat, cgroup_name, give_back, sweep_cgroups, take_seat
from phalanx.spec.model import Build

ONE_CORE = Resources(cpu=Range(limits=1), memory=Range(limits=256))


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def test_a_seat_holds_its_cores_and_memory_until_it_is_given_back(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.json")
    seat = take_seat(ledger, "notebook-a", ONE_CORE, "vision", "notebook of project vision")
    assert seat is not None and len(seat.grant.cpus) == 1 and seat.grant.memory_mib == 256
    [held] = ledger.snapshot()[0]
    assert (held.experiment_id, held.project, held.cpus) == ("notebook-a", "vision", seat.grant.cpus)
    # one thread per math library for its one core; no GPU, as it holds none
    assert seat.env() == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    give_back(ledger, seat)
    assert ledger.snapshot()[0] == []


def test_a_notebook_that_asks_for_nothing_takes_no_seat(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.json")
    assert take_seat(ledger, "notebook-a", None, "vision", "notebook") is None
    assert take_seat(ledger, "notebook-a", Resources(), "vision", "notebook") is None
    assert ledger.snapshot()[0] == []


@pytest.mark.skipif(_cores() < 2, reason="needs 2 cores to hold one and ask for all")
def test_no_room_now_is_said_at_once_with_who_holds_the_machine(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.json")
    held = take_seat(ledger, "notebook-a", ONE_CORE, "vision", "notebook of project vision")
    everything = Resources(cpu=Range(limits=_cores()))
    with pytest.raises(Conflict) as busy:
        take_seat(ledger, "notebook-b", everything, "nlp", "notebook of project nlp")
    assert "no room for the notebook of project nlp now" in busy.value.message
    assert "notebook of project vision" in busy.value.message
    assert [e.experiment_id for e in ledger.snapshot()[0]] == ["notebook-a"]  # nothing left waiting
    assert ledger.snapshot()[1] == []
    give_back(ledger, held)
    fits = take_seat(ledger, "notebook-b", everything, "nlp", "notebook")
    assert fits is not None
    give_back(ledger, fits)  # its cgroup too (one is made where this machine lets us)


def test_a_sweep_removes_only_what_dead_holders_of_its_own_ledger_left(tmp_path: Path) -> None:
    # two homes (two servers, or a server and a notebook started here) make their cgroups in one
    # folder: one's sweep at start must never remove the other's cgroup made and not yet joined
    mine, theirs = Ledger(tmp_path / "a" / "ledger.json"), Ledger(tmp_path / "b" / "ledger.json")
    seat = take_seat(mine, "notebook-a", ONE_CORE, "vision", "notebook")
    assert seat is not None
    if seat.cgroup is None:
        give_back(mine, seat)
        pytest.skip("no writable cgroups on this machine")
    left = {
        ledger: Cgroup.create(cgroup_name(ledger, "notebook-dead"), memory_bytes=None, cpus=1, pids_max=None)
        for ledger in (mine, theirs)
    }
    try:
        sweep_cgroups(theirs)  # another home's server starts
        assert all(Path(f).is_dir() for f in seat.cgroup.folders)  # still there, empty, to be joined
        assert not any(Path(f).exists() for f in left[theirs].folders)  # what its own dead holder left
        assert all(Path(f).is_dir() for f in left[mine].folders)
        sweep_cgroups(mine)
        assert all(Path(f).is_dir() for f in seat.cgroup.folders)  # held in its ledger
        assert not any(Path(f).exists() for f in left[mine].folders)
    finally:
        for made in left.values():
            made.remove()
        give_back(mine, seat)
    assert not any(Path(f).exists() for f in seat.cgroup.folders)


def test_a_sweep_never_removes_the_cgroup_another_process_of_its_ledger_makes_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two processes over one ledger (PHALANX_LEDGER, or a server and `phalanx notebook` in one home):
    # one sweeps; between its look at the ledger and its rmdirs the other takes a seat and makes
    # its cgroup, empty until its program joins: the sweep must not take that for a dead holder's
    ledger = Ledger(tmp_path / "ledger.json")
    probe = take_seat(ledger, "notebook-probe", ONE_CORE, "vision", "notebook")
    writable = probe is not None and probe.cgroup is not None
    give_back(ledger, probe)
    if not writable:
        pytest.skip("no writable cgroups on this machine")
    other = Ledger(ledger.path)  # the other process's own view (its own lock descriptor)
    taken: list[Seat | None] = []
    starts: list[threading.Thread] = []
    remove_empty = cgroups.remove_empty

    def racing(left: Callable[[str], bool]) -> None:
        if not starts:  # the sweep under test: the other process starts its seat now
            starts.append(
                threading.Thread(
                    target=lambda: taken.append(take_seat(other, "notebook-b", ONE_CORE, "nlp", "notebook"))
                )
            )
            starts[0].start()
            starts[0].join(timeout=1.0)  # done by now, unless the sweep holds the ledger
        remove_empty(left)

    monkeypatch.setattr(cgroups, "remove_empty", racing)
    sweep_cgroups(ledger)
    starts[0].join(timeout=30)
    [seat] = taken
    assert seat is not None and seat.cgroup is not None
    try:
        assert all(Path(f).is_dir() for f in seat.cgroup.folders), "the sweep removed a seat being started"
    finally:
        give_back(other, seat)


def test_more_than_the_machine_has_can_never_start(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="can never start here"):
        take_seat(
            Ledger(tmp_path / "ledger.json"), "n", Resources(cpu=Range(limits=_cores() + 1)), "p", "notebook"
        )


def test_the_thread_that_starts_a_notebook_runs_on_its_cores_only_while_it_starts_it() -> None:
    core = min(os.sched_getaffinity(0))
    seat = Seat("notebook-a", Grant(cpus=(core,)))
    before = os.sched_getaffinity(0)
    seen: list[set[int]] = []

    def start() -> None:  # from a thread of its own, as the server's spawner starts services
        with seat.pinned():
            seen.append(os.sched_getaffinity(0))  # what a process started here inherits
        seen.append(os.sched_getaffinity(0))

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    assert seen == [{core}, before]
    assert os.sched_getaffinity(0) == before  # the other threads never moved


def test_kernels_get_the_ipykernel_of_this_jupyterlab_unless_the_file_names_one() -> None:
    added = kernel_build(Build(pip_packages=("numpy==2.1.0",)))
    assert added.pip_packages == ("numpy==2.1.0", f"ipykernel=={metadata.version('ipykernel')}")
    named = Build(pip_packages=("ipykernel==6.29.5",))
    assert kernel_build(named) == named


def test_the_kernel_spec_runs_the_build_python_with_the_sdk_copy(tmp_path: Path) -> None:
    python = tmp_path / "venvs" / "abc123" / "bin" / "python"
    data = write_kernel(tmp_path / "jupyter", python, tmp_path / "sdk", "environment abc123")
    spec = json.loads((data / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][:3] == [str(python), "-m", "ipykernel_launcher"]
    assert spec["env"] == {"PYTHONPATH": str(tmp_path / "sdk")}
    assert spec["display_name"] == "Python 3 (environment abc123)"
