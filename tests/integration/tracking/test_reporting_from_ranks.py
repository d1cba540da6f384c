"""examples/reporting-from-ranks end to end: seed 003's ranks all report into ONE experiment, run as
a plain `python train.py` (ranks spawned by torch.multiprocessing) and through `phalanx run` with a
master and two workers."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.ingest import Ingester
from phalanx.store import open_store
from phalanx.store.sql import SqlStore

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "reporting-from-ranks"
PHALANX = Path(sys.executable).parent / "phalanx"
pytestmark = pytest.mark.slow


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PYTHONUNBUFFERED="1")
    return env


def _store(home: Path) -> SqlStore:
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    Ingester(store, None, home / "spool").run_once()  # whatever the detached ingester has not yet
    return store


def _assert_one_experiment_holds_every_rank(store: SqlStore, ranks: int, iterations: int) -> str:
    [exp] = store.list_experiments().items
    assert exp.status == ExperimentStatus.SUCCEEDED, exp
    assert (exp.project, exp.name) == ("examples", "test torch distributed")
    names = [f"temp {r:02d}" for r in range(ranks)]
    artifacts = {a.name: a for a in store.artifacts(exp.id)}
    assert sorted(artifacts) == names
    assert store.artifact_store is not None
    for r, name in enumerate(names):
        assert json.loads(store.artifact_store.read_bytes(exp.id, artifacts[name].path)) == {"worker_rank": r}
        assert artifacts[name].rank == r
    loss = store.metrics(exp.id)["loss"]
    assert sorted(loss) == [f"worker {r:02d}" for r in range(ranks)]
    for series in loss.values():
        assert series.steps == list(range(iterations))
        assert series.values[-1] < series.values[0]  # it trained
    params = {(p.section, p.key): p for p in store.params(exp.id)}
    for r in range(ranks):
        stuff = params[("General", f"worker_{r}_stuff")]
        assert str(stuff.value).startswith("some stuff ") and stuff.rank == r
    assert params[("Args", "iterations")].value == iterations
    console = "\n".join(line.text for line in store.logs(exp.id))
    for r in range(ranks):  # ranks print at once: their lines may interleave, as on a terminal
        assert f"worker {r:02d}: final loss" in console, console
    assert "ARGS: Namespace(" in console
    return exp.id


def test_plain_python_run_reports_every_rank_into_one_experiment(tmp_path: Path) -> None:
    # two spawned ranks (the example's default is three): each is a Python start importing torch,
    # and two already report into the main task from processes other than the one that created it
    home = tmp_path / "home"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "--nodes", "2", "--iterations", "8"],
        env=_env(home), cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_one_experiment_holds_every_rank(_store(home), ranks=2, iterations=8)


def test_phalanx_run_with_a_master_and_two_workers_reports_into_one_experiment(tmp_path: Path) -> None:
    if (
        importlib.util.find_spec("phalanx.cli.run") is None
        or importlib.util.find_spec("phalanx.supervisor") is None
    ):
        pytest.skip("`phalanx run` is not available in this tree yet")
    home = tmp_path / "home"
    done = subprocess.run(
        [str(PHALANX), "run", "-f", str(EXAMPLE / "polyaxonfile.yml"), "--param", "iterations=8"],
        env=_env(home), cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    store = _store(home)
    exp_id = _assert_one_experiment_holds_every_rank(store, ranks=3, iterations=8)
    replicas = {r.name: r for r in store.list_replicas(exp_id)}
    assert sorted(replicas) == ["master", "worker-0", "worker-1"]
    assert all(r.exit_code == 0 for r in replicas.values())
    by_replica = {a.name: a.replica for a in store.artifacts(exp_id)}
    assert by_replica == {"temp 00": "master", "temp 01": "worker-0", "temp 02": "worker-1"}
