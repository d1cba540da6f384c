"""Experiment groups on the real two-node Slurm: `phalanx group run --cluster` submits every trial as
one Slurm job (its two replicas on the nodes), tracks each as an experiment of the group, keeps no
more than `concurrency` trials in Slurm at once, and `phalanx group stop` scancels a running trial's
job, leaving nothing in the queue.

The trials are tiny scripts (a loss that depends on one param, reported each step), not training.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.local.conftest import Phalanx, environ_of, kill_started, wait_for
from tests.integration.local.test_groups import TRAIN
from tests.support.slurm import LocalSlurm

from phalanx.clusters import add_cluster
from phalanx.errors import NotFound

pytest.importorskip("optuna")
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def phalanx(slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path) -> Iterator[Phalanx]:
    """The CLI against a PHALANX_HOME where the local Slurm is registered; a controller a failed test
    left running is killed (the test that cares asserts nothing was left)."""
    add_cluster(slurm_cluster.cluster(), phalanx_home)
    cli = Phalanx(phalanx_home, tmp_path)
    cli.env["SLURM_CONF"] = str(slurm_cluster.conf)
    yield cli
    kill_started(cli)


def group_file(
    phalanx: Phalanx, hptuning: str, steps: int, pause: float, environment: str = "  replicas:\n"
) -> Path:
    folder = phalanx.tmp / "group"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    path = folder / "group.yml"
    path.write_text(
        "version: 1\nkind: group\nname: sweep\nframework: pytorch\n"
        f"environment:\n{environment}    n_workers: 1\n"
        f"hptuning:\n{hptuning}"
        f"run:\n  cmd: python train.py {{{{ x }}}} {steps} {pause}\n"
    )
    return path


def jobs(slurm: LocalSlurm) -> list[str]:
    """ "NAME STATE" of every job Slurm still holds (a trial's job is named phalanx-EXPERIMENT)."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%j %T"], env=slurm.env(), capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if line.strip()]


def leftover(experiment_ids: set[str]) -> list[str]:
    """Live processes of these experiments: their supervisors (`phalanx run --detach ...
    --experiment-id ID`) and their Slurm tasks (PHALANX_EXPERIMENT_ID in their environment)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        env = environ_of(int(entry.name))
        if stat != "Z" and (
            env.get("PHALANX_EXPERIMENT_ID") in experiment_ids or any(e in cmdline for e in experiment_ids)
        ):
            found.append(f"{entry.name} {cmdline}")
    return found


class QueueWatch:
    """Samples `squeue` while a group runs: the most trial jobs Slurm held at once."""

    def __init__(self, slurm: LocalSlurm) -> None:
        self.slurm = slurm
        self.most = 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            names = [line.split()[0] for line in jobs(self.slurm)]
            self.seen.update(names)
            self.most = max(self.most, len(names))

    def __enter__(self) -> QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_a_random_search_runs_its_trials_as_slurm_jobs_two_at_a_time_across_a_controller_kill(
    phalanx: Phalanx, slurm_cluster: LocalSlurm
) -> None:
    path = group_file(
        phalanx,
        "  concurrency: 2\n  random_search: {n_experiments: 3, seed: 5}\n"
        "  metric: {name: loss, optimization: minimize}\n  matrix:\n    x: {uniform: 0:1}\n",
        steps=10,
        pause=0.2,
    )
    store = phalanx.store()

    def a_trial_running_in_slurm() -> str | None:
        groups = store.list_groups()
        states = dict(line.split()[:2] for line in jobs(slurm_cluster))
        for t in store.list_trials(groups[0].id) if groups else []:
            if states.get(f"phalanx-{t.experiment_id}") == "RUNNING":
                return groups[0].id
        return None

    with QueueWatch(slurm_cluster) as watch:
        controller = phalanx.start("group", "run", "-f", str(path), "--cluster", slurm_cluster.name)
        group_id = wait_for(a_trial_running_in_slurm, timeout=120, what="a trial running in Slurm")
        controller.kill()  # SIGKILL: the trials' supervisors and Slurm jobs go on without it
        controller.communicate(timeout=30)
        resumed = phalanx.run("group", "resume", group_id, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(phalanx.cli("group", "get", group_id, "-o", "json").stdout)
    assert doc["status"] == "succeeded" and len(doc["trials"]) == 3, doc
    experiments = [store.get_experiment(t["experiment_id"]) for t in doc["trials"]]
    assert sorted(e.id for e in store.list_experiments().items) == sorted(
        e.id for e in experiments
    )  # none twice
    assert all(e.status == "succeeded" for e in experiments), [(e.status, e.reason) for e in experiments]
    assert all(e.group_id == group_id and e.cluster == slurm_cluster.name for e in experiments)
    for e in experiments:  # each trial ran on Slurm: master on one node, its worker on the other
        replicas = store.list_replicas(e.id)
        assert sorted(r.host or "" for r in replicas) == ["n1", "n2"], [r.host for r in replicas]
        for r in replicas:  # each with its start time, though Slurm first showed its job pending
            assert r.started_at is not None and r.started_at <= r.finished_at, (r.name, r.started_at)
    for t in doc["trials"]:
        assert t["state"] == "done" and abs(t["value"] - (t["params"]["x"] + 1 / 10)) < 1e-9
    best = min(doc["trials"], key=lambda t: t["value"])
    assert doc["best"]["number"] == best["number"]
    # every trial was a Slurm job of its own, never more than `concurrency` of them in the queue
    assert {f"phalanx-{e.id}" for e in experiments} <= watch.seen, watch.seen
    assert 1 <= watch.most <= 2, watch.most
    listed = phalanx.cli("ls", "--group", group_id, "-o", "json")
    assert {e["id"] for e in json.loads(listed.stdout)} == {e.id for e in experiments}
    assert slurm_cluster.wait_queue_empty() == []
    ids = {e.id for e in experiments}
    assert wait_for(lambda: not leftover(ids), timeout=30, what="every trial process gone")


CPU2 = "  resources: {cpu: {requests: 2, limits: 2}}\n"
WHOLE_NODE = CPU2 + "  replicas:\n    default_worker: {resources: {cpu: {requests: 2, limits: 2}}}\n"


def test_group_stop_scancels_the_running_trial_and_the_one_slurm_holds_pending(
    phalanx: Phalanx, slurm_cluster: LocalSlurm
) -> None:
    # each trial takes both nodes whole: the second trial's job waits in Slurm behind the first
    path = group_file(
        phalanx,
        "  concurrency: 2\n  random_search: {n_experiments: 4, seed: 2}\n"
        "  metric: {name: loss, optimization: minimize}\n  matrix:\n    x: {uniform: 0:1}\n",
        steps=600,
        pause=0.2,
        environment=WHOLE_NODE,
    )
    started = phalanx.run("group", "run", "-f", str(path), "--cluster", slurm_cluster.name, "--detach")
    assert started.returncode == 0, started.stderr
    group_id = started.stdout.strip()
    store = phalanx.store()

    def reported(experiment_id: str) -> bool:
        try:
            return bool(store.metrics(experiment_id).get("loss"))
        except NotFound:  # its supervisor has submitted the job but not yet recorded it
            return False

    def one_running_one_pending() -> dict[str, str]:
        states = dict(line.split()[:2] for line in jobs(slurm_cluster))
        trials = {
            t.experiment_id: states.get(f"phalanx-{t.experiment_id}") for t in store.list_trials(group_id)
        }
        running = [e for e, s in trials.items() if s == "RUNNING" and reported(e)]
        pending = [e for e, s in trials.items() if s == "PENDING"]
        return {"running": running[0], "pending": pending[0]} if running and pending else {}

    seen = wait_for(one_running_one_pending, timeout=120, what="one trial running in Slurm, one pending")
    stopped = phalanx.cli("group", "stop", group_id)
    assert stopped.returncode == 0, stopped.stderr
    doc = json.loads(phalanx.cli("group", "get", group_id, "-o", "json").stdout)
    assert doc["status"] == "stopped" and len(doc["trials"]) == 2, doc
    assert {t["experiment_id"] for t in doc["trials"]} == set(seen.values())
    for t in doc["trials"]:
        assert t["state"] == "stopped", t
        exp = store.get_experiment(t["experiment_id"])
        assert exp.status == "stopped" and exp.reason == "stopped by phalanx group stop", (
            exp.status,
            exp.reason,
        )
        replicas = store.list_replicas(exp.id)
        assert all(r.state == "stopped" for r in replicas), [(r.name, r.state) for r in replicas]
        for r in replicas:  # a replica that reached a node has its start time; one cancelled in the
            # queue has none (the trials are stopped at once, but Slurm may start the queued one on
            # the nodes the other frees before its own scancel lands)
            assert (r.started_at is None) == (r.host is None), (r.name, r.host, r.started_at)
            if exp.id == seen["running"]:
                assert r.host and r.started_at is not None, (r.name, r.host, r.started_at)
    assert slurm_cluster.wait_queue_empty(timeout=30) == []
    assert wait_for(lambda: not leftover(set(seen.values())), timeout=30, what="every trial process gone")


def test_a_pruned_trial_is_scancelled_mid_run_with_the_pruners_reason(
    phalanx: Phalanx, slurm_cluster: LocalSlurm
) -> None:
    path = group_file(
        phalanx,
        "  concurrency: 1\n  grid_search: {}\n  seed: 1\n"  # seed 1: x=0.1 first, then x=0.9
        "  metric: {name: loss, optimization: minimize}\n"
        "  pruning: {kind: successive_halving, min_resource: 2, reduction_factor: 2}\n"
        "  matrix:\n    x: {values: [0.1, 0.9]}\n",
        steps=30,
        pause=0.1,
    )
    done = phalanx.run(
        "group", "run", "-f", str(path), "--cluster", slurm_cluster.name, "--json", timeout=180
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    first, second = doc["trials"]
    assert first["state"] == "done" and second["state"] == "pruned", doc["trials"]
    assert doc["best"]["params"] == {"x": 0.1}
    exp = phalanx.store().get_experiment(second["experiment_id"])
    assert exp.status == "stopped" and (exp.reason or "").startswith(
        f"pruned at step {second['step']}: loss "
    )
    assert second["step"] < 30  # its job was cancelled mid-run, not left to finish
    assert slurm_cluster.wait_queue_empty(timeout=30) == []
    ids = {first["experiment_id"], second["experiment_id"]}
    assert wait_for(lambda: not leftover(ids), timeout=30, what="every trial process gone")


def test_a_group_whose_trials_slurm_can_never_hold_is_refused_before_anything_is_recorded(
    phalanx: Phalanx, slurm_cluster: LocalSlurm
) -> None:
    path = group_file(
        phalanx,
        "  concurrency: 2\n  random_search: {n_experiments: 3}\n"
        "  metric: {name: loss, optimization: minimize}\n  matrix:\n    x: {uniform: 0:1}\n",
        steps=1,
        pause=0.1,
        environment="  resources: {cpu: {requests: 64, limits: 64}}\n  replicas:\n",
    )
    # in this process (tests/support/cli.py): the refusal comes before anything is started, and the
    # real-process `group run` is the other tests'
    refused = phalanx.cli("group", "run", "-f", str(path), "--cluster", slurm_cluster.name)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith(f"error: {path}: its trials cannot run (a trial with x=0.0): ")
    assert f"Slurm cluster {slurm_cluster.name} can never run this experiment" in refused.stderr
    assert "--cpus-per-task=64" in refused.stderr and "Traceback" not in refused.stderr
    assert "no groups yet" in phalanx.cli("group", "ls").stdout  # nothing recorded, no trial failed
    assert phalanx.store().list_experiments().items == []
    assert jobs(slurm_cluster) == []
