"""Supervision with real processes: fail fast, no orphans (even when `phalanx run` is SIGKILLed),
Ctrl-C, restarts, memory limits, stop and logs."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.runner import LaunchOptions, Runner
from phalanx.spec.loader import load_spec
from phalanx.spec.model import ExperimentSpec
from phalanx.supervisor import prepare

from .conftest import Phalanx, experiment_pids, replica_pid, wait_for

SLEEPER = "python -c \"import time; print('ready', flush=True); time.sleep(600)\""


def sleeper_spec(phalanx: Phalanx, workers: int = 1, extra: str = "") -> str:
    return str(
        phalanx.spec(
            f"""
            version: 1
            kind: experiment
            framework: pytorch
            environment:
              replicas:
                n_workers: {workers}
            run:
              cmd: {json.dumps(SLEEPER)}
            {extra}
            """
        )
    )


def wait_started(phalanx: Phalanx, names: list[str]) -> dict[str, int]:
    """The pids of the replicas' sleepers, once each has printed `ready` (so its log holds a line)."""

    def ready(name: str) -> bool:
        return any("ready" in p.read_text() for p in phalanx.home.glob(f"runs/*/logs/{name}.log"))

    for n in names:
        wait_for(lambda n=n: ready(n), what=f"{n} to print ready")
    return {
        n: wait_for(lambda n=n: replica_pid(phalanx.home, n, "time.sleep"), what=f"{n} to start")
        for n in names
    }


def test_a_killed_worker_fails_the_experiment_within_seconds_and_nothing_remains(phalanx: Phalanx) -> None:
    proc = phalanx.start("run", "-f", sleeper_spec(phalanx, workers=2))
    pids = wait_started(phalanx, ["master", "worker-0", "worker-1"])
    killed_at = time.monotonic()
    os.kill(pids["worker-1"], signal.SIGKILL)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err
    assert time.monotonic() - killed_at < 60  # fail fast, not the 90 s bound (generous: shared cores)
    exp = phalanx.only_experiment()
    assert exp.status == "failed"
    assert exp.reason.startswith("worker-1 exited with code 137 (its command was killed by SIGKILL)"), (
        exp.reason
    )
    assert "ready" in exp.reason  # its last log lines
    assert experiment_pids(phalanx.home, exp.id) == []
    states = {r.name: (r.state, r.exit_code) for r in phalanx.store().list_replicas(exp.id)}
    assert states["worker-1"] == ("failed", 137)
    assert states["master"][0] == "stopped" and states["worker-0"][0] == "stopped"


def test_a_worker_exiting_non_zero_is_named_with_its_code_and_last_lines(phalanx: Phalanx) -> None:
    cmd = 'if [ "$PHALANX_REPLICA" = worker-0 ]; then echo "boom: bad shard" >&2; exit 3; fi; sleep 600'
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1
        run:
          cmd: {json.dumps(cmd)}
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 1
    exp = phalanx.only_experiment()
    assert exp.reason.startswith("worker-0 exited with code 3"), exp.reason
    assert "boom: bad shard" in exp.reason
    assert "worker-0 exited with code 3" in result.stderr


def test_sigkill_of_phalanx_run_leaves_no_replica_alive(phalanx: Phalanx) -> None:
    # a replica that also leaves a daemonised grandchild (setsid) behind
    cmd = "setsid sleep 600 & " + SLEEPER
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1
        run:
          cmd: {json.dumps(cmd)}
        """
    )
    proc = phalanx.start("run", "-f", str(spec))
    wait_started(phalanx, ["master", "worker-0"])
    assert len(experiment_pids(phalanx.home)) >= 6  # reapers, shells, sleepers
    proc.kill()
    proc.communicate(timeout=30)
    wait_for(lambda: not experiment_pids(phalanx.home), what="every replica process to end")


def test_ctrl_c_stops_every_replica_and_marks_the_experiment_stopped(phalanx: Phalanx) -> None:
    proc = phalanx.start("run", "-f", sleeper_spec(phalanx))
    wait_started(phalanx, ["master", "worker-0"])
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=90)
    assert proc.returncode == 130
    exp = phalanx.only_experiment()
    assert exp.status == "stopped"
    assert experiment_pids(phalanx.home) == []
    assert {r.state for r in phalanx.store().list_replicas(exp.id)} == {"stopped"}


def test_max_restarts_restarts_the_whole_group_after_a_failure(phalanx: Phalanx) -> None:
    cmd = (
        'if [ "$PHALANX_REPLICA" = worker-0 ] && [ ! -e crashed ]; then touch crashed; exit 3; fi; echo "ok"'
    )
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        framework: pytorch
        environment:
          replicas:
            n_workers: 1
        run:
          cmd: {json.dumps(cmd)}
          max_restarts: 2
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 0, result.stderr
    assert "restarting the group (1/2)" in result.stderr
    exp = phalanx.only_experiment()
    assert exp.status == "succeeded"
    assert len(list((phalanx.home / "runs" / exp.id / "attempts").iterdir())) == 2


def test_a_group_that_keeps_failing_fails_after_its_restarts(phalanx: Phalanx) -> None:
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        run:
          cmd: exit 4
          max_restarts: 1
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 1
    exp = phalanx.only_experiment()
    assert exp.reason.startswith("master exited with code 4")
    assert len(list((phalanx.home / "runs" / exp.id / "attempts").iterdir())) == 2


def test_a_restart_whose_work_folder_is_gone_fails_with_that_reason_not_a_traceback(
    phalanx: Phalanx, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        run:
          cmd: rm -rf "$PWD"; exit 4
          max_restarts: 1
        """
    )
    result = phalanx.run("run", "-f", str(spec), "--workdir", str(work))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    exp = phalanx.only_experiment()
    assert exp.status == "failed"
    assert exp.reason.startswith("master exited with code 4; the group could not start again:"), exp.reason
    assert f"the work folder {work} is gone" in exp.reason
    assert f"the work folder {work} is gone" in result.stderr
    # the group that could not start left no attempt folder: the next one's number stays free
    assert [p.name for p in (phalanx.home / "runs" / exp.id / "attempts").iterdir()] == ["0"]


def test_a_recorded_experiment_whose_folder_went_away_before_its_start_fails_with_that_reason(
    phalanx: Phalanx, tmp_path: Path
) -> None:
    """As after a wait in the machine's queue: the experiment exists (`phalanx ls` lists it), so its
    start failing is its failure, reported as one (exit 1, its id), not a refusal (exit 2)."""
    settings = Settings(home=phalanx.home)
    work = tmp_path / "work"
    work.mkdir()
    # a core asked for: it goes through the machine's queue, which records it before its start
    asks = "version: 1\nkind: experiment\nenvironment:\n  resources:\n    cpu:\n      requests: 1\n"
    spec = load_spec(phalanx.spec(asks + "run:\n  cmd: echo hi\n"))
    prepared = prepare(spec, settings=settings, workdir=work)
    work.rmdir()
    outcome = Runner(settings).run(prepared, LaunchOptions(), handle_signals=False)
    assert outcome.status is ExperimentStatus.FAILED
    assert outcome.reason is not None and f"the work folder {work} is gone" in outcome.reason
    exp = phalanx.only_experiment()
    assert (exp.id, exp.status, exp.reason) == (outcome.experiment_id, "failed", outcome.reason)


def test_a_replica_over_its_memory_limit_is_killed_with_that_reason(phalanx: Phalanx) -> None:
    hog = "python -c \"import time\nb = []\nwhile True:\n    b.append(b'x' * (8 << 20)); time.sleep(0.02)\""
    spec = phalanx.spec(
        f"""
        version: 1
        kind: experiment
        environment:
          resources:
            memory:
              limits: 100
        run:
          cmd: {json.dumps(hog)}
        """
    )
    result = phalanx.run("run", "-f", str(spec))
    assert result.returncode == 1
    exp = phalanx.only_experiment()
    assert exp.reason.startswith("master memory limit 100Mi exceeded"), exp.reason
    assert phalanx.store().list_replicas(exp.id)[0].reason == "memory limit 100Mi exceeded"


def test_phalanx_stop_stops_a_detached_run_and_logs_follow_ends_with_it(phalanx: Phalanx) -> None:
    started = phalanx.run("run", "-f", sleeper_spec(phalanx), "--detach")
    assert started.returncode == 0, started.stderr
    exp_id = started.stdout.strip()
    wait_started(phalanx, ["master", "worker-0"])
    follower = phalanx.start("logs", exp_id, "--follow")
    short = phalanx.run("stop", exp_id[:6])  # a prefix unique today names another tomorrow
    assert short.returncode == 2 and f"at least 8 characters of it (e.g. {exp_id})" in short.stderr
    stopped = phalanx.run("stop", exp_id[:8])  # the `phalanx stop` process a user types
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped" in stopped.stdout
    out, _ = follower.communicate(timeout=60)
    assert "[worker-0] ready" in out and "[master] ready" in out
    assert phalanx.store().get_experiment(exp_id).status == "stopped"
    wait_for(lambda: not experiment_pids(phalanx.home), what="every replica process to end")


def test_phalanx_stop_cleans_up_after_a_supervisor_that_was_killed(phalanx: Phalanx) -> None:
    proc = phalanx.start("run", "-f", sleeper_spec(phalanx))
    wait_started(phalanx, ["master", "worker-0"])
    store = phalanx.store()
    wait_for(
        lambda: [e for e in store.list_experiments().items if e.status == "running"], what="a running row"
    )
    proc.kill()
    proc.communicate(timeout=30)
    exp = phalanx.only_experiment()
    assert exp.status == "running"  # nobody was left to say otherwise
    stopped = phalanx.cli("stop", exp.id)
    assert stopped.returncode == 0, stopped.stderr
    exp = phalanx.store().get_experiment(exp.id)
    assert exp.status == "stopped" and "supervisor was gone" in (exp.reason or "")


def test_an_engine_that_restarts_replicas_itself_is_not_restarted_again(
    phalanx: Phalanx, tmp_path: Path
) -> None:
    """The Kubeflow operator restarts from backoffLimit; a second restart loop would double them."""
    from phalanx.backends.local.engine import LocalBackend

    class SelfRestartingEngine(LocalBackend):
        restarts_itself = True

    settings = Settings(home=phalanx.home)
    spec = ExperimentSpec(version=1, kind="experiment", command=("exit 4",), max_restarts=2)
    engine = SelfRestartingEngine(settings=settings)
    prepared = prepare(spec, settings=settings, workdir=tmp_path, backend=engine)
    outcome = Runner(settings).run(prepared, LaunchOptions(), handle_signals=False)
    assert outcome.status is ExperimentStatus.FAILED
    assert outcome.restarts == 0
    assert len(list((phalanx.home / "runs" / outcome.experiment_id / "attempts").iterdir())) == 1
