"""The straggler view: steps/s per rank from reported steps and their times; a rank that sleeps is
named in `phalanx get` (text and JSON), and equal ranks name nobody."""

from __future__ import annotations

import json

from .conftest import Phalanx

STEPS = """
import os, time
import phalanx
slow = os.environ["PHALANX_REPLICA"] == os.environ.get("SLOW_REPLICA")
for step in range(int(os.environ["N_STEPS"])):
    time.sleep(0.25 if slow else float(os.environ["STEP_SECONDS"]))
    phalanx.log_metrics(step=step, loss=1.0 / (step + 1))
phalanx.Task.current_task().flush()
"""


def _run(phalanx: Phalanx, slow: str, steps: int = 15, step_seconds: float = 0.08) -> dict:
    folder = phalanx.tmp / "exp"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "steps.py").write_text(STEPS)
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 2
        env:
          SLOW_REPLICA: "{slow}"
          N_STEPS: "{steps}"
          STEP_SECONDS: "{step_seconds}"
        run:
          cmd: python steps.py
        """
    )
    result = phalanx.run("run", "-f", str(spec), "-o", "json", "--no-system-metrics")
    assert result.returncode == 0, result.stderr[-2000:]
    exp_id = json.loads(result.stdout)["id"]
    got = phalanx.cli("get", exp_id, "-o", "json")
    assert got.returncode == 0, got.stderr
    text = phalanx.cli("get", exp_id).stdout
    return {"json": json.loads(got.stdout), "text": text}


def test_a_sleeping_rank_is_named_the_straggler(phalanx: Phalanx) -> None:
    out = _run(phalanx, slow="worker-1")
    pace = out["json"]["pace"]
    assert pace["title"] == "loss"
    assert {r["replica"] for r in pace["ranks"]} == {"master", "worker-0", "worker-1"}
    assert pace["straggler"]["replica"] == "worker-1", pace
    rates = {r["replica"]: r["steps_per_second"] for r in pace["ranks"]}
    assert rates["worker-1"] < rates["master"] / 2
    assert "straggler: worker-1" in out["text"]


def test_ranks_at_the_same_pace_name_no_straggler(phalanx: Phalanx) -> None:
    # the pace is measured over the last WINDOW (20) points: 20 steps of 0.2 s span 3.8 s, so a
    # rank must lose 0.76 s to scheduling to be named (0.23 s over 15 steps of 0.08 s: a loaded
    # 2-core machine running 3 ranks, their reapers and the supervisor could)
    out = _run(phalanx, slow="nobody", steps=20, step_seconds=0.2)
    assert out["json"]["pace"]["straggler"] is None, out["json"]["pace"]
    assert "straggler" not in out["text"]
