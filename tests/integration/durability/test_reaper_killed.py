"""Whoever outlives a replica's reaper owns its processes: when the reaper itself (the subreaper
that leads the replica's process group) is SIGKILLed, the replica's processes, a child that left the
process group included, are ended by the supervisor; the experiment fails naming the replica and
what happened, and no process of it remains once `phalanx run` has returned (the ledger frees the
cores only then)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from tests.integration.local.conftest import Phalanx, experiment_pids, wait_for

from phalanx.domain import ExperimentStatus

SCRIPT = """
import os, pathlib, subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])  # stays in the replica's process group
escaped = subprocess.Popen(["sleep", "601"], start_new_session=True)  # leaves it
pathlib.Path({marker!r} + os.environ["PHALANX_REPLICA"]).write_text(f"{{child.pid}} {{escaped.pid}}")
time.sleep(600)
"""


def _reaper_of(home: Path) -> int:
    """The pid of the master's reaper, as the local engine recorded it (state.json)."""
    state = next((home / "runs").glob("*/attempts/0/state.json"))
    units = json.loads(state.read_text())["units"]
    return int(next(u["pid"] for u in units if u["name"] == "master"))


@pytest.mark.parametrize("trial", range(3))
def test_a_killed_reaper_leaves_no_process_and_the_experiment_says_so(phalanx: Phalanx, trial: int) -> None:
    marker = phalanx.tmp / "children-"
    phalanx.spec(SCRIPT.format(marker=str(marker)), name="train.py")
    spec = phalanx.spec(
        "version: 1\nkind: experiment\nframework: pytorch\nenvironment:\n  replicas:\n    n_workers: 1\n"
        "run:\n  cmd: python train.py\n"
    )
    proc = phalanx.start("run", "-f", str(spec))
    wait_for(
        lambda: all(Path(f"{marker}{r}").exists() for r in ("master", "worker-0")) or proc.poll() is not None,
        what="the replica and its children",
    )
    assert proc.poll() is None, proc.communicate()
    reaper = _reaper_of(phalanx.home)
    os.kill(reaper, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    # `phalanx run` returns only once the replica's processes are gone, the escaped one included
    left = experiment_pids(phalanx.home)
    assert not left, f"still running after `phalanx run` returned: {left}\n{err}"
    assert proc.returncode == 1, f"{err}\nstdout: {out[-2000:]}"
    exp = phalanx.only_experiment()
    assert exp.status == ExperimentStatus.FAILED, exp
    assert "master" in (exp.reason or "") and "SIGKILL" in (exp.reason or ""), exp.reason
    assert "master stopped" not in out + err, out + err


def test_a_reaper_killed_with_its_supervisor_leaves_nothing_after_the_next_command(phalanx: Phalanx) -> None:
    """Both the supervisor and the master's reaper die (SIGKILL, the supervisor held still so it
    cannot clean up first): the next read command, which marks the experiment failed, also ends
    what the reaper left running."""
    marker = phalanx.tmp / "children-"
    phalanx.spec(SCRIPT.format(marker=str(marker)), name="train.py")
    spec = phalanx.spec(
        "version: 1\nkind: experiment\nframework: pytorch\nenvironment:\n  replicas:\n    n_workers: 1\n"
        "run:\n  cmd: python train.py\n"
    )
    proc = phalanx.start("run", "-f", str(spec))
    wait_for(
        lambda: all(Path(f"{marker}{r}").exists() for r in ("master", "worker-0")) or proc.poll() is not None,
        what="the replicas and their children",
    )
    assert proc.poll() is None, proc.communicate()
    store = phalanx.store()
    wait_for(
        lambda: [e for e in store.list_experiments().items if e.status == ExperimentStatus.RUNNING],
        what="the experiment recorded as running",
    )
    supervisor = int(next((phalanx.home / "runs").glob("*/supervisor.pid")).read_text().split()[0])
    os.kill(supervisor, signal.SIGSTOP)
    os.kill(_reaper_of(phalanx.home), signal.SIGKILL)
    os.kill(supervisor, signal.SIGKILL)
    proc.communicate(timeout=60)
    listed = phalanx.cli("ls")
    assert listed.returncode == 0, listed.stderr
    left = experiment_pids(phalanx.home)
    assert not left, f"outlived the next command: {left}; {phalanx.only_experiment()}; {listed.stderr}"
    exp = phalanx.only_experiment()
    assert exp.status == ExperimentStatus.FAILED and "killed before it recorded" in (exp.reason or ""), exp
