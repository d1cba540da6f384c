"""A restarted group (max_restarts) that reports its steps again, without a checkpoint to go on
from, replaces the failed attempt's points instead of repeating them (issue 18): one point per step,
the last attempt's values, and `phalanx get` lists the attempts the points were numbered by."""

from __future__ import annotations

from .conftest import Phalanx

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
    shown = phalanx.run("get", exp.id)
    assert shown.returncode == 0, shown.stderr
    assert "  0  start: failed" in shown.stdout and "  1  restart: succeeded" in shown.stdout, shown.stdout
