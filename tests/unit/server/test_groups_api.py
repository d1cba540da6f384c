"""`POST /api/v1/groups/{id}/stop`: what `phalanx group stop` does, from the API (the route's
docstring promised it; only the CLI had it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from phalanx.domain import ExperimentStatus
from phalanx.store.base import Store

pytest.importorskip("optuna")

GROUP = """\
version: 1
kind: group
hptuning:
  concurrency: 2
  random_search: {n_experiments: 4}
  matrix:
    lr: {values: [0.1, 0.2, 0.3, 0.4]}
run:
  cmd: python train.py --lr={{ lr }}
"""


def _group_with_a_running_trial(store: Store, home: Path) -> str:
    from phalanx.domain import Trial
    from phalanx.groups.controller import create
    from phalanx.spec.group import load_group

    (home / "g.yml").write_text(GROUP)
    sql = store
    group = create(sql, load_group(home / "g.yml"), workdir=home)
    exp = store.create_experiment(name="g-0", project="default", status=ExperimentStatus.RUNNING)
    sql.add_trial(Trial(group.id, 0, exp.id, {"lr": 0.1}, "running", None, None))
    sql.link_experiment(exp.id, group.id)
    sql.update_group(group.id, status="running")  # its controller is gone (never started here)
    return group.id


def test_stop_ends_the_group_and_its_running_trial(
    client: TestClient, store: Store, phalanx_home: Path
) -> None:
    gid = _group_with_a_running_trial(store, phalanx_home)
    short = client.post(f"/api/v1/groups/{gid[:6]}/stop")  # a prefix unique today names another later
    assert short.status_code == 400 and "at least 8 characters" in short.text
    r = client.post(f"/api/v1/groups/{gid[:8]}/stop")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["status"] == "stopped"
    (trial,) = doc["trials"]
    assert trial["state"] == "stopped"
    assert store.get_experiment(trial["experiment_id"]).status is ExperimentStatus.STOPPED
    again = client.post(f"/api/v1/groups/{gid}/stop")
    assert again.status_code == 200 and again.json()["status"] == "stopped"  # idempotent
    assert client.post("/api/v1/groups/zzzz/stop").status_code == 404
