"""Retention: the store keeps exactly the checkpoints the policy says, rows and files."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.checkpoints import Checkpoint, Policy, PolicyError, from_artifacts, retain
from phalanx.domain import Event, EventKind
from phalanx.store.sql import SqlStore


def _ckpt(step: int, acc: float) -> Checkpoint:
    return Checkpoint(f"checkpoint-{step}", step, f"p{step}", {"accuracy": acc, "loss": 1 - acc})


def test_keep_last_and_keep_best_by_a_metric() -> None:
    found = [_ckpt(s, a) for s, a in enumerate([0.5, 0.9, 0.6, 0.7, 0.65])]
    assert retain(found, Policy(keep_last=2)) == {"checkpoint-3", "checkpoint-4"}
    best = Policy(keep_last=1, keep_best=1, metric="accuracy")
    assert retain(found, best) == {"checkpoint-4", "checkpoint-1"}
    by_loss = Policy(keep_last=0, keep_best=2, metric="loss")  # "loss": lower is better
    assert retain(found, by_loss) == {"checkpoint-1", "checkpoint-3"}
    assert retain(found, Policy()) == {c.name for c in found}  # no policy: everything


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"keep_last": -1}, "keep_last: expected a whole number"),
        ({"keep_best": 1}, "keep_best: needs checkpoints.metric"),
        ({"keep_last": 0}, "would keep no checkpoint"),
        ({"mode": "up", "metric": "a"}, "mode: expected max or min"),
        ({"keep": 3}, "keep: unknown key"),
    ],
)
def test_a_bad_policy_names_the_key(policy: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        Policy.parse(policy)


def test_the_store_applies_the_policy_to_rows_and_files(store: SqlStore) -> None:
    exp = store.create_experiment(name="e", project="p").id
    assert store.artifact_store is not None
    policy = {"keep_last": 2, "keep_best": 1, "metric": "accuracy"}
    for step, acc in enumerate([0.5, 0.9, 0.6, 0.7, 0.65]):
        path = f"checkpoints/master/step-{step:09d}.pkl"
        store.artifact_store.put_bytes(exp, path, b"x" * (step + 1))
        data = {
            "name": f"checkpoint-{step}",
            "kind": "checkpoint",
            "path": path,
            "size": step + 1,
            "metadata": {"step": step, "metrics": {"accuracy": acc}, "policy": policy},
        }
        store.write_events([Event(exp, EventKind.ARTIFACT, data, stream="s", seq=step)])
    kept = from_artifacts(store.artifacts(exp))
    assert [c.step for c in kept] == [1, 3, 4]  # the best (0.9 at step 1) and the last two
    assert sorted(store.artifact_store.list(exp, "checkpoints")) == [
        f"checkpoints/master/step-{s:09d}.pkl" for s in (1, 3, 4)
    ]


def test_keep_last_counts_steps_when_several_ranks_save_each_step() -> None:
    """keep_last is "the N latest steps" (docs/checkpoints.md): with two ranks saving every epoch,
    keep_last 2 keeps both ranks' copies of the last two steps, not the two copies of the last one."""
    found = []
    for step in range(4):
        found.append(Checkpoint(f"checkpoint-{step}", step, f"m{step}", {}, "master", time=step))
        worker = f"checkpoint-{step} [worker-0 rank 1]"
        found.append(Checkpoint(worker, step, f"w{step}", {}, "worker-0", time=step))
    assert retain(found, Policy(keep_last=2)) == {
        "checkpoint-2",
        "checkpoint-2 [worker-0 rank 1]",
        "checkpoint-3",
        "checkpoint-3 [worker-0 rank 1]",
    }
