"""A replica's processes die with its leader: when the reaper that leads a replica is SIGKILLed,
the experiment fails and none of the replica's processes (children included) keeps running."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from tests.integration.local.conftest import Phalanx, experiment_pids, replica_pid, wait_for

from phalanx.domain import ExperimentStatus

SCRIPT = """
import pathlib, subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])
pathlib.Path({marker!r}).write_text(str(child.pid))
time.sleep(600)
"""


@pytest.mark.parametrize("victim", ["reaper", "user process"])
def test_killing_a_replica_leader_leaves_none_of_its_processes(phalanx: Phalanx, victim: str) -> None:
    marker = phalanx.tmp / "child"
    phalanx.spec(SCRIPT.format(marker=str(marker)), name="train.py")
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python train.py\n")
    proc = phalanx.start("run", "-f", str(spec))
    wait_for(lambda: marker.exists() or proc.poll() is not None, what="the replica and its child")
    assert proc.poll() is None, proc.communicate()
    user = wait_for(lambda: replica_pid(phalanx.home, "master", "train.py"), what="the replica's process")
    # the replica's leader: the process its reaper started (`sh -c` here), the user's script's parent
    leader = int(Path(f"/proc/{user}/stat").read_text().rsplit(")", 1)[1].split()[1])
    killed = leader if victim == "reaper" else user
    what = Path(f"/proc/{killed}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    os.kill(killed, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    statuses = {str(p): p.read_text() for p in (phalanx.home / "runs").rglob("*.status.json")}
    assert proc.returncode == 1, f"killed {killed} ({what})\n{err}\nstdout: {out[-2000:]}\n{statuses}"
    wait_for(lambda: not experiment_pids(phalanx.home), timeout=60, what="no process of the experiment left")
    exp = phalanx.only_experiment()
    assert exp.status == ExperimentStatus.FAILED and "master" in (exp.reason or ""), exp.reason


def test_a_phalanx_run_killed_during_start_up_leaves_a_visible_experiment_or_nothing(
    phalanx: Phalanx,
) -> None:
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python -c \"print('hi')\"\n")
    proc = phalanx.start("run", "-f", str(spec))
    runs = phalanx.home / "runs"
    pid_file = wait_for(
        lambda: next(iter(runs.glob("*/supervisor.pid")), None) if runs.is_dir() else None,
        timeout=60,
        what="the supervisor's pid file",
    )
    proc.send_signal(signal.SIGKILL)  # in its first second: replicas starting, store maybe not open
    proc.wait(30)
    exp_id = pid_file.parent.name
    # nothing of the killed run may still be starting when `ls` cleans up: a reaper spawned just
    # before the kill could otherwise write into the run folder after `ls` removed it
    wait_for(lambda: not experiment_pids(phalanx.home), timeout=15, what="no replica left")
    listed = phalanx.cli("ls", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    if exp_id in listed.stdout:  # recorded: then it is visible with a final status
        exp = phalanx.store().get_experiment(exp_id)
        assert exp.status.done, exp
    else:  # never recorded: nothing of it is left
        assert not (runs / exp_id).exists()
        assert not (phalanx.home / "spool" / exp_id).exists()
