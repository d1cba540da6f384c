"""Restart from the latest checkpoint: a 2-replica job in lock-step (a barrier each epoch, like DDP's
all_reduce) saves a checkpoint each epoch; its worker is SIGKILLed in epoch 3 on the first attempt;
with max_restarts 1 the group restarts from the epoch-2 checkpoint, so every loss series runs 0..5
exactly once and the final value equals an unbroken run's. Retention keeps what the policy says."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Phalanx

EPOCHS = 6

TRAIN = """
import os, signal, sys, time
from pathlib import Path
from phalanx import Task

task = Task.init()
rank = int(os.environ["RANK"])
group = os.environ["MASTER_PORT"]           # new for each started group
marks = Path(sys.argv[1])
marks.mkdir(exist_ok=True)

def barrier(epoch):
    (marks / f"{group}-{epoch}-{rank}").touch()
    other = marks / f"{group}-{epoch}-{1 - rank}"
    while not other.exists():
        time.sleep(0.02)

ckpt = task.latest_checkpoint()
state = task.load_checkpoint() if ckpt is not None else {"epoch": -1, "w": 10.0}
start = state["epoch"] + 1
print(f"rank {rank} starts at epoch {start}", flush=True)
for epoch in range(start, EPOCHS):
    if rank == 1 and epoch == 3 and ckpt is None:
        # the worker dies in epoch 3 of the first attempt, once the master has reached epoch 3: it
        # touches that mark only after save_checkpoint(step=2) returned (durable in its spool), so
        # the restart's "latest checkpoint" is step 2, not a race with the supervisor's SIGTERM
        while not (marks / f"{group}-3-0").exists():
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGKILL)
    w = state["w"] * 0.5                         # deterministic "training"
    barrier(epoch)
    state = {"epoch": epoch, "w": w}
    task.get_logger().report_scalar("loss", task.replica, w, iteration=epoch)
    if rank == 0:
        task.save_checkpoint(state, step=epoch, metrics={"loss": w, "accuracy": 1 - w / 10})
    else:
        task.flush(wait_for_uploads=False)  # a SIGKILL loses what was not written to the spool
    print(f"rank {rank} epoch {epoch} loss {w}", flush=True)
if rank == 0:
    task.get_logger().report_scalar("final_accuracy", "master", 1 - state["w"] / 10, iteration=0)
task.flush()
""".replace("EPOCHS", str(EPOCHS))


def _spec(phalanx: Phalanx, restarts: int) -> Path:
    folder = phalanx.tmp / "exp"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    return phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1
        run:
          cmd: python train.py {folder / "marks"}
          max_restarts: {restarts}
          checkpoints:
            keep_last: 2
        """
    )


def test_a_restarted_group_continues_from_the_latest_checkpoint(phalanx: Phalanx) -> None:
    result = phalanx.run("run", "-f", str(_spec(phalanx, restarts=1)))
    store = phalanx.store()
    exp = phalanx.only_experiment()
    assert result.returncode == 0, (exp.reason, result.stderr[-3000:])
    loss = store.metrics(exp.id, "loss")["loss"]
    expected = [10.0 * 0.5 ** (e + 1) for e in range(EPOCHS)]
    for replica in ("master", "worker-0"):
        assert loss[replica].steps == list(range(EPOCHS)), (replica, loss[replica].steps)
        assert loss[replica].values == expected  # continuous: epoch 3 picks up epoch 2's weights
    final = store.metrics(exp.id, "final_accuracy")["final_accuracy"]["master"].values
    assert final == [1 - expected[-1] / 10]  # what an unbroken run reaches
    lines = [line.text for line in store.logs(exp.id)]  # the replicas' own lines, not quoted ones
    for rank in (0, 1):
        assert lines.count(f"rank {rank} starts at epoch 0") == 1, lines  # no epoch 0 again
        assert lines.count(f"rank {rank} starts at epoch 3") == 1, lines
        assert lines.count(f"rank {rank} epoch 3 loss {expected[3]}") == 1, lines
    assert any("continuing from checkpoint step 2" in line for line in lines)
    # the replicas show how this attempt ended, not the killed attempt's exit code and reason
    rows = {r.name: (r.state, r.exit_code, r.reason) for r in store.list_replicas(exp.id)}
    assert rows == {"master": ("succeeded", 0, None), "worker-0": ("succeeded", 0, None)}, rows

    # retention: keep_last 2 leaves exactly the last two, files included
    from phalanx.checkpoints import from_artifacts

    kept = from_artifacts(store.artifacts(exp.id))
    assert [c.step for c in kept] == [EPOCHS - 2, EPOCHS - 1]
    folder = Path(store.artifact_store.url(exp.id, "checkpoints/master"))
    assert sorted(p.name for p in folder.iterdir()) == [f"step-{s:09d}.pkl" for s in (EPOCHS - 2, EPOCHS - 1)]

    shown = phalanx.cli("checkpoints", exp.id, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert [c["step"] for c in doc["checkpoints"]] == [EPOCHS - 2, EPOCHS - 1]
    assert doc["latest"]["step"] == EPOCHS - 1


def test_without_restarts_the_worker_kill_fails_the_experiment(phalanx: Phalanx) -> None:
    result = phalanx.run("run", "-f", str(_spec(phalanx, restarts=0)))
    assert result.returncode == 1
    exp = phalanx.only_experiment()
    assert exp.reason.startswith("worker-0 exited with code 137"), exp.reason
