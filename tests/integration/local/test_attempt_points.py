"""A restarted group (max_restarts) that reports its steps again, without a checkpoint to go on
from, replaces the failed attempt's points instead of repeating them (issue 18): one point per step,
the last attempt's values, and `phalanx get` lists the attempts the points were numbered by."""

from __future__ import annotations

from .conftest import Phalanx, wait_for

TRAIN = """
import os, sys
from pathlib import Path
from phalanx import Task

task = Task.init()
mark = Path("first-attempt-done")
attempt = 1 if mark.exists() else 0
mark.touch()
print(f"attempt {attempt}: PHALANX_ATTEMPT={os.environ.get('PHALANX_ATTEMPT')}", flush=True)
for step in range(10):
    task.get_logger().report_scalar("loss", "train", 100.0 * attempt + step, iteration=step)
    if attempt == 0 and step == 6:
        task.flush()
        sys.exit(1)  # the first attempt fails after step 6
task.flush()
"""


def test_a_restarted_group_reporting_its_steps_again_leaves_one_point_per_step(phalanx: Phalanx) -> None:
    folder = phalanx.tmp / "exp"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        run:
          cmd: python train.py
          max_restarts: 1
        """
    )
    result = phalanx.run("run", "--no-system-metrics", "-f", str(spec))
    exp = phalanx.only_experiment()
    assert result.returncode == 0, (exp.reason, result.stderr[-3000:])
    series = phalanx.store().metrics(exp.id, "loss")["loss"]["train"]
    assert series.steps == list(range(10))
    assert series.values == [100.0 + s for s in range(10)]
    lines = [line.text for line in phalanx.store().logs(exp.id)]
    assert "attempt 0: PHALANX_ATTEMPT=None" in lines and "attempt 1: PHALANX_ATTEMPT=1" in lines, lines
    shown = phalanx.cli("get", exp.id)
    assert shown.returncode == 0, shown.stderr
    assert "  0  start: failed" in shown.stdout and "  1  restart: succeeded" in shown.stdout, shown.stdout


RESUMABLE = """
import os, time
from phalanx import Task

task = Task.init()
ckpt = task.latest_checkpoint()
start = 0 if ckpt is None else ckpt.step + 1
print(f"starts at epoch {start} as attempt {os.environ.get('PHALANX_ATTEMPT')}", flush=True)
for epoch in range(start, 6):
    task.get_logger().report_scalar("loss", "master", 10.0 * (ckpt is not None) + epoch, iteration=epoch)
    if epoch == 3 and ckpt is None:  # reported, but stopped before its checkpoint
        task.flush()
        print("waiting to be stopped", flush=True)
        time.sleep(600)
    task.save_checkpoint({"epoch": epoch}, step=epoch)
task.flush()
"""


def test_phalanx_resume_replaces_the_steps_reported_after_the_checkpoint(phalanx: Phalanx) -> None:
    folder = phalanx.tmp / "exp"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(RESUMABLE)
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python train.py\n")
    started = phalanx.run("run", "--no-system-metrics", "-f", str(spec), "--detach")
    assert started.returncode == 0, started.stderr
    exp_id = started.stdout.strip()
    store = phalanx.store()

    def reported_step_3() -> bool:
        series = store.metrics(exp_id, "loss").get("loss", {}).get("master")
        return series is not None and 3 in series.steps

    wait_for(reported_step_3, what="step 3 of the first attempt")
    assert phalanx.cli("stop", exp_id).returncode == 0
    resumed = phalanx.run("resume", exp_id)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    loss = store.metrics(exp_id, "loss")["loss"]["master"]
    assert loss.steps == [0, 1, 2, 3, 4, 5]  # step 3 once: the resumed attempt's
    assert loss.values == [0.0, 1.0, 2.0, 13.0, 14.0, 15.0]
    lines = [line.text for line in store.logs(exp_id)]
    assert "starts at epoch 3 as attempt 1" in lines, lines
