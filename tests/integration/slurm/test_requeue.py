"""A Slurm job requeued mid-run (`scontrol requeue`, what a node failure or preemption does) runs
again as the next attempt of the same experiment, and the steps it reports again replace the first
attempt's: one point per step, attempts numbered alike in the store and in the tasks (issue 18)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tests.integration.local.conftest import wait_for
from tests.support.cli import phalanx_cli
from tests.support.slurm import LocalSlurm

from phalanx.clusters import add_cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(180)]

STEPS = 40
TRAIN = """
import os, sys, time
from pathlib import Path
from phalanx import Task

task = Task.init()
attempt = int(os.environ["PHALANX_ATTEMPT"])
marks = Path(sys.argv[1])
print(f"attempt {attempt} starts", flush=True)
for step in range(STEPS):
    task.get_logger().report_scalar("loss", "train", 100.0 * attempt + step, iteration=step)
    if attempt == 0 and step == 25:
        task.flush()
        (marks / "requeue-me").touch()  # the test requeues the job now
        time.sleep(300)
task.flush()
""".replace("STEPS", str(STEPS))


def _dump(slurm: LocalSlurm, prepared: object) -> str:
    """What the run folder and Slurm hold: why a requeued job did not finish."""
    run_dir = slurm.dir / "shared" / "runs" / prepared.experiment_id  # type: ignore[attr-defined]
    out = [f"squeue: {slurm.squeue()}"]
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and path.name not in ("job.sbatch", "task.sh"):
            out.append(f"--- {path.relative_to(run_dir)}\n{path.read_text(errors='replace')[-1500:]}")
    return "\n".join(out)


def test_a_requeued_job_continues_the_attempts_and_leaves_one_point_per_step(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.spec.loader import load_spec_text
    from phalanx.store import open_store
    from phalanx.supervisor import Outcome
    from phalanx.supervisor.stopping import write_stop_request

    monkeypatch.setenv("PHALANX_SYSTEM_METRICS", "off")  # only the script's own points
    settings = Settings()
    add_cluster(slurm_cluster.cluster(), phalanx_home)
    (tmp_path / "train.py").write_text(TRAIN)
    marks = tmp_path / "marks"
    marks.mkdir()
    # max_restarts makes the job requeueable (#SBATCH --requeue)
    spec = load_spec_text(
        "version: 1\nkind: experiment\n"
        f"run:\n  cmd: {sys.executable} -u train.py {marks}\n  max_restarts: 1\n"
    )
    launcher = Runner(settings)
    prepared = launcher.prepare(spec, LaunchOptions(cluster=slurm_cluster.name, workdir=tmp_path))
    assert "#SBATCH --requeue" in prepared.dry_run.render()
    store = open_store(settings)
    result: dict[str, Outcome] = {}
    runner = threading.Thread(
        target=lambda: result.setdefault(
            "outcome", launcher.run(prepared, LaunchOptions(), handle_signals=False, store=store)
        )
    )
    runner.start()
    try:
        wait_for(lambda: (marks / "requeue-me").exists(), 90, "the first attempt to reach step 25")
        handle = store.get_experiment(prepared.experiment_id).handle
        assert handle
        job_id = handle.split(":")[0]
        env = slurm_cluster.env()
        subprocess.run(["scontrol", "requeue", job_id], env=env, check=True, timeout=30)
        # once back in the queue a requeued job waits 2 minutes (BeginTime) before it may start again
        wait_for(lambda: f"{job_id} PENDING" in slurm_cluster.squeue(), 60, "the job back in the queue")
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, check=True)
        runner.join(timeout=90)
        assert not runner.is_alive(), f"the requeued job did not finish:\n{_dump(slurm_cluster, prepared)}"
    finally:
        if runner.is_alive():
            write_stop_request(settings, prepared.experiment_id, "the test gave up")  # scancel, then it ends
            runner.join(timeout=60)
    outcome = result["outcome"]
    assert outcome.status is ExperimentStatus.SUCCEEDED, outcome.reason
    attempts = store.attempts(prepared.experiment_id)
    # Slurm ran it again, not the supervisor
    assert outcome.restarts == 0, f"{attempts}\n{_dump(slurm_cluster, prepared)}"

    series = store.metrics(outcome.experiment_id, "loss")["loss"]["train"]
    assert series.steps == list(range(STEPS))  # exactly one point per step
    assert series.values == [100.0 + s for s in range(STEPS)]  # the second attempt's
    attempts = store.attempts(outcome.experiment_id)
    assert [(a["number"], a["kind"], a["status"]) for a in attempts] == [
        (0, "start", "failed"),
        (1, "requeue", "succeeded"),
    ], attempts
    shown = phalanx_cli("get", outcome.experiment_id)
    assert "  0  start: failed (requeued by slurm)" in shown.stdout, (shown.stdout, shown.stderr)
    assert "  1  requeue: succeeded" in shown.stdout, shown.stdout
    lines = [line.text for line in store.logs(outcome.experiment_id)]
    assert "attempt 1 starts" in lines, lines
    run_dir = slurm_cluster.dir / "shared" / "runs" / outcome.experiment_id
    assert [p.name for p in (run_dir / "attempts").iterdir()] == ["0"]
    assert slurm_cluster.wait_queue_empty() == []
