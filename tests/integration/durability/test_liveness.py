"""The liveness check (PHALANX_HANG_TIMEOUT): a SIGSTOPped replica fails the experiment within
seconds, and the reason names it, not the peer that waits for it."""

from __future__ import annotations

import json
import time

import pytest
from tests.integration.durability.figures import figure
from tests.integration.local.conftest import Phalanx, wait_for

from phalanx.domain import ExperimentStatus


def test_a_stalled_replica_is_named_and_fails_the_experiment(phalanx: Phalanx) -> None:
    phalanx.spec(
        """
        import os, signal, time
        print("started", flush=True)
        if os.environ["PHALANX_REPLICA"] == "worker-0":
            os.kill(os.getpid(), signal.SIGSTOP)   # hangs (as a worker that stops calling all_reduce)
        time.sleep(600)                            # the master waits for it, idle
        """,
        name="hang.py",
    )
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1
        run:
          cmd: python hang.py
        """
    )
    phalanx.env["PHALANX_HANG_TIMEOUT"] = "3"
    started = time.monotonic()
    done = phalanx.run("run", "-f", str(spec), timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    exp = phalanx.only_experiment()
    assert exp.status == ExperimentStatus.FAILED
    assert (exp.reason or "").startswith("worker-0 is stopped"), exp.reason
    assert "hang_timeout 3 s" in (exp.reason or "")
    assert took < 90, took  # within a few hang_timeouts, not the run's 120 s bound (generous)
    figure(
        "replica SIGSTOPped, PHALANX_HANG_TIMEOUT=3", status=str(exp.status), seconds_to_final=round(took, 1)
    )


DDP = """
import os, time, torch, torch.distributed as dist
from phalanx import Task
task = Task.init()
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
for step in range(3):
    if rank == 1 and step == 1:
        end = time.process_time() + 2
        while time.process_time() < end:  # a slow batch: it works on after the master went idle,
            pass
        time.sleep(600)                   # then hangs: it never reaches all_reduce again
    # one series per rank, named as seed 003 names them (not after the replica)
    task.get_logger().report_scalar("loss", f"rank {rank}", 1.0 / (step + 1), iteration=step)
    print(f"step {step}", flush=True)
    dist.all_reduce(t)  # the master waits for it here (gloo alone would wait 30 minutes)
"""


def test_a_worker_that_stops_calling_all_reduce_is_caught(phalanx: Phalanx) -> None:
    pytest.importorskip("torch")
    phalanx.spec(DDP, name="ddp.py")
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1
        run:
          cmd: python ddp.py
        """
    )
    phalanx.env["PHALANX_HANG_TIMEOUT"] = "5"
    started = time.monotonic()
    done = phalanx.run("run", "-f", str(spec), timeout=180)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    reason = phalanx.only_experiment().reason or ""
    assert "made no progress" in reason and "hang_timeout 5 s" in reason, reason
    # the hung worker is named, not the master it left waiting in all_reduce (idle longer than it)
    assert reason.startswith("worker-0 made no progress"), reason
    assert "waiting for it: master" in reason, reason
    figure(
        "DDP worker stops calling all_reduce, PHALANX_HANG_TIMEOUT=5",
        seconds_to_final=round(took, 1),
        reason=reason.split(";")[0],
    )


def test_a_silent_hung_replica_is_named_then_failed_by_the_file_s_times(phalanx: Phalanx) -> None:
    """A replica that prints a line, then sleeps for ever (no step, no output, no CPU): after
    run.stall_notice `phalanx get` says it stalled while the experiment still runs, the alert hook
    hears of it, and after run.hang_timeout the experiment fails naming it, with its last line.
    The fail time is the file's, not the 30-minute default: short (10 s), yet long enough after the
    notice (2 s) for the test to read `phalanx get` while the experiment still runs."""
    phalanx.spec('import time\nprint("loading the data", flush=True)\ntime.sleep(3600)\n', name="hang.py")
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        run:
          cmd: python hang.py
          stall_notice: 2
          hang_timeout: 10
        """
    )
    heard = phalanx.tmp / "alerts.jsonl"
    phalanx.env["PHALANX_ALERT_COMMAND"] = f"cat >> {heard}; echo >> {heard}"
    proc = phalanx.start("run", "-f", str(spec))
    store = phalanx.store()
    exp = wait_for(
        lambda: next((e for e in store.list_experiments().items if "stalled" in (e.reason or "")), None),
        what="the stall notice in the experiment's reason",
    )
    shown = phalanx.cli("get", exp.id)  # in this process: the notice stands for 8 s at most
    line = next(x for x in shown.stdout.splitlines() if x.startswith("status:"))
    assert line.startswith(
        "status:    running (stalled: master made no progress (no step, no output, no CPU time) for"
    ), line
    assert "(stall_notice 2 s); it fails after 10 s without progress)" in line, line
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, out + err
    reason = phalanx.only_experiment().reason or ""
    assert reason.startswith("master made no progress (no step, no output, no CPU time) for"), reason
    assert "(hang_timeout 10 s); last lines of its log:\n  loading the data" in reason, reason
    kinds = [json.loads(x)["kind"] for x in heard.read_text().splitlines() if x.strip()]
    assert kinds == ["stalled", "hung"], heard.read_text()
