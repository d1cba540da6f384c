"""The supervisor's rules on a scripted in-process engine in virtual time (tests/support/scripted):
fail-fast, restarts, the TensorFlow chief rule and max_run_seconds, each in milliseconds. The same
rules run on real processes in tests/integration/local/test_supervision.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework
from phalanx.spec.model import ExperimentSpec, Topology
from phalanx.store.artifacts import ArtifactStore
from phalanx.store.sql import SqlStore
from phalanx.supervisor import supervising
from phalanx.supervisor.stopping import write_stop_request
from tests.support.scripted import RUNS_FOREVER, Ends, dump, replica_rows, supervise

# Every test here takes milliseconds of wall time whatever virtual time it covers. The bound only
# catches virtual time leaking into real sleeps (the rules cover minutes of virtual time), so it is
# generous: a loaded 2-core CI machine can stall a millisecond test for seconds.
WALL_BUDGET = 20.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlStore]:
    root = tmp_path_factory.mktemp("scripted-store")
    s = SqlStore(f"sqlite:///{root / 'phalanx.db'}", ArtifactStore(str(root / "artifacts")))
    yield s
    s.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=str(tmp_path / "home"))


@pytest.fixture(autouse=True)
def fast(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    assert time.monotonic() - started < WALL_BUDGET, "a scripted supervision test must be fast"


def spec(
    framework: Framework | None = Framework.PYTORCH, workers: int = 2, ps: int = 0, **kw: object
) -> ExperimentSpec:
    return ExperimentSpec(
        version=1,
        kind="experiment",
        command=("python train.py",),
        framework=framework,
        topology=Topology(n_workers=workers, n_ps=ps),
        **kw,  # type: ignore[arg-type]
    )


def test_every_replica_succeeding_is_success(store: SqlStore, settings: Settings) -> None:
    outcome, engine = supervise(spec(), [{"master": Ends(0.5, lines=("done",))}], store, settings)
    assert (outcome.status, outcome.restarts, engine.submits) == (ExperimentStatus.SUCCEEDED, 0, 1)
    assert set(replica_rows(store, outcome.experiment_id).values()) == {("succeeded", 0)}
    assert [line.text for line in store.logs(outcome.experiment_id, "master")] == ["done"]


def test_a_failed_replica_fails_fast_stopping_its_siblings(store: SqlStore, settings: Settings) -> None:
    script = {
        "master": RUNS_FOREVER,
        "worker-0": Ends(0.3, exit_code=3, lines=("loading", "RuntimeError: boom")),
        "worker-1": RUNS_FOREVER,
    }
    outcome, engine = supervise(spec(), [script], store, settings)
    assert outcome.status is ExperimentStatus.FAILED
    assert outcome.reason is not None and outcome.reason.startswith("worker-0 exited with code 3")
    assert "RuntimeError: boom" in outcome.reason  # the last lines of its log are quoted
    handle, cancelled_at = engine.cancels[0]
    submitted = engine.jobs[handle].submitted
    assert cancelled_at - submitted == pytest.approx(0.3, abs=supervising.POLL_SECONDS + 1e-6), dump(engine)
    rows = replica_rows(store, outcome.experiment_id)
    assert rows["worker-0"] == ("failed", 3)
    assert rows["master"][0] == rows["worker-1"][0] == "stopped"


def test_the_first_replica_to_fail_is_the_culprit_when_two_fail_between_polls(
    store: SqlStore, settings: Settings
) -> None:
    script = {
        "master": RUNS_FOREVER,
        "worker-1": Ends(0.23, exit_code=1),
        "worker-0": Ends(0.25, exit_code=2),
    }
    outcome, _ = supervise(spec(), [script], store, settings)
    assert outcome.reason is not None and outcome.reason.startswith("worker-1 exited with code 1")


def test_a_failed_group_is_restarted_up_to_max_restarts_with_a_fresh_dry_run(
    store: SqlStore, settings: Settings
) -> None:
    fails = {"master": RUNS_FOREVER, "worker-1": Ends(0.2, exit_code=1)}
    outcome, engine = supervise(spec(max_restarts=2), [fails, fails], store, settings)
    assert (outcome.status, outcome.restarts, engine.submits) == (ExperimentStatus.SUCCEEDED, 2, 3)
    assert engine.dry_runs == 3  # new ports for each new group
    assert [h for h, _ in engine.cancels].count(f"{outcome.experiment_id}:0") >= 1  # nothing left behind
    notes = [line.text for line in store.logs(outcome.experiment_id, "master")]
    assert any("restarting the group (2/2)" in text for text in notes)


def test_restarts_stop_at_max_restarts(store: SqlStore, settings: Settings) -> None:
    fails = {"worker-0": Ends(0.1, exit_code=1), "master": RUNS_FOREVER}
    outcome, engine = supervise(spec(max_restarts=1), [fails] * 5, store, settings)
    assert (outcome.status, outcome.restarts, engine.submits) == (ExperimentStatus.FAILED, 1, 2)


def test_an_engine_that_restarts_replicas_itself_is_not_restarted_again(
    store: SqlStore, settings: Settings
) -> None:
    fails = {"worker-0": Ends(0.1, exit_code=1), "master": RUNS_FOREVER}
    outcome, engine = supervise(spec(max_restarts=3), [fails] * 5, store, settings, restarts_itself=True)
    assert (outcome.status, outcome.restarts, engine.submits) == (ExperimentStatus.FAILED, 0, 1)


def test_tensorflow_chief_success_ends_the_experiment_after_the_servers_grace(
    store: SqlStore, settings: Settings
) -> None:
    """ParameterServerStrategy: its workers are servers too (they never end by themselves)."""
    script = {"master": Ends(1.0), "worker-0": RUNS_FOREVER, "ps-0": RUNS_FOREVER}
    outcome, engine = supervise(spec(Framework.TENSORFLOW, workers=1, ps=1), [script], store, settings)
    assert outcome.status is ExperimentStatus.SUCCEEDED
    handle, cancelled_at = engine.cancels[0]
    waited = cancelled_at - engine.jobs[handle].submitted - 1.0
    assert supervising.TF_SERVER_GRACE_SECONDS <= waited <= supervising.TF_SERVER_GRACE_SECONDS + 0.2
    rows = replica_rows(store, outcome.experiment_id)
    assert rows["master"] == ("succeeded", 0) and rows["worker-0"][0] == rows["ps-0"][0] == "stopped"
    assert any("stopping the TensorFlow servers" in line.text for line in store.logs(outcome.experiment_id))


def test_tensorflow_ps_servers_are_stopped_once_every_worker_has_ended(
    store: SqlStore, settings: Settings
) -> None:
    """Between-graph PS training: the workers train and end; the ps servers only serve them, so
    they are stopped as soon as the last worker ends (not after the grace)."""
    script = {"master": Ends(1.0), "worker-0": Ends(1.5), "ps-0": RUNS_FOREVER}
    outcome, engine = supervise(spec(Framework.TENSORFLOW, workers=1, ps=1), [script], store, settings)
    assert outcome.status is ExperimentStatus.SUCCEEDED
    handle, cancelled_at = engine.cancels[0]
    waited = cancelled_at - engine.jobs[handle].submitted - 1.5
    assert 0 <= waited <= supervising.POLL_SECONDS + 0.2
    rows = replica_rows(store, outcome.experiment_id)
    assert rows["master"] == rows["worker-0"] == ("succeeded", 0) and rows["ps-0"][0] == "stopped"
    assert any("stopping the TensorFlow servers" in line.text for line in store.logs(outcome.experiment_id))


def test_tensorflow_what_a_worker_does_after_the_chief_succeeded_cannot_fail_it(
    store: SqlStore, settings: Settings
) -> None:
    script = {"master": Ends(1.0), "worker-0": Ends(1.4, exit_code=1), "ps-0": RUNS_FOREVER}
    outcome, _ = supervise(spec(Framework.TENSORFLOW, workers=1, ps=1), [script], store, settings)
    assert outcome.status is ExperimentStatus.SUCCEEDED


def test_tensorflow_a_worker_failing_before_the_chief_fails_the_experiment(
    store: SqlStore, settings: Settings
) -> None:
    script = {"master": Ends(1.0), "worker-0": Ends(0.4, exit_code=1), "ps-0": RUNS_FOREVER}
    outcome, _ = supervise(spec(Framework.TENSORFLOW, workers=1, ps=1), [script], store, settings)
    assert outcome.status is ExperimentStatus.FAILED


def test_the_chief_rule_is_tensorflows_only(store: SqlStore, settings: Settings) -> None:
    script = {"master": Ends(1.0), "worker-0": RUNS_FOREVER}
    outcome, _ = supervise(spec(Framework.PYTORCH, workers=1, max_run_seconds=30), [script], store, settings)
    assert outcome.status is ExperimentStatus.FAILED and "max_run_seconds" in (outcome.reason or "")


def test_max_run_seconds_fails_an_experiment_that_runs_too_long(store: SqlStore, settings: Settings) -> None:
    script = {"master": RUNS_FOREVER, "worker-0": RUNS_FOREVER, "worker-1": RUNS_FOREVER}
    outcome, engine = supervise(spec(max_run_seconds=60, max_restarts=2), [script], store, settings)
    assert outcome.status is ExperimentStatus.FAILED
    assert outcome.reason == "ran longer than max_run_seconds (60 s)"
    # not restarted: the deadline counts from the experiment's start, so a new group would be
    # stopped at once (it was started and killed max_restarts times)
    assert engine.submits == 1, dump(engine)
    handle, cancelled_at = engine.cancels[0]
    assert 60 <= cancelled_at - engine.jobs[handle].submitted <= 60 + 0.2
    assert {state for state, _ in replica_rows(store, outcome.experiment_id).values()} == {"stopped"}


def test_time_pending_in_a_clusters_queue_counts_neither_for_the_stop_nor_for_the_restart(
    store: SqlStore, settings: Settings
) -> None:
    """max_run_seconds=60: the first group waits 100 s in the engine's queue, then a worker fails
    after 10 s of running. The experiment ran 10 s, not 110: it is restarted, and the second
    group is stopped once the two together have run 60 s."""
    scripts = [
        {"master": RUNS_FOREVER, "worker-0": Ends(10.0, exit_code=1), "worker-1": RUNS_FOREVER},
        {"master": RUNS_FOREVER, "worker-0": RUNS_FOREVER, "worker-1": RUNS_FOREVER},
    ]
    outcome, engine = supervise(
        spec(max_run_seconds=60, max_restarts=1), scripts, store, settings, pending=[100.0, 0.0]
    )
    assert engine.submits == 2, dump(engine)  # restarted: pending time is not running time
    assert outcome.status is ExperimentStatus.FAILED
    assert outcome.reason == "ran longer than max_run_seconds (60 s)"
    second = engine.jobs[engine.cancels[-1][0]]
    assert 50 <= engine.cancels[-1][1] - second.started <= 50 + 0.3  # 10 s + 50 s of running


def test_a_stop_request_left_before_the_start_submits_nothing(store: SqlStore, settings: Settings) -> None:
    outcome, engine = supervise(
        spec(), [], store, settings, before_run=lambda p: write_stop_request(settings, p.experiment_id)
    )
    assert (outcome.status, outcome.reason, engine.submits) == (
        ExperimentStatus.STOPPED,
        "stopped on request",
        0,
    )
