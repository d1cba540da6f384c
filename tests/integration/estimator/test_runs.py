"""Experiment.submit and the Run handle against real supervisors and real replica processes."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from phalanx import Estimator, Experiment, PyTorch
from phalanx.domain import ExperimentStatus
from phalanx.errors import NotFound, PhalanxError, UsageError
from phalanx.runs import Run, RunFailed, RunTimeout


def wait_until(condition: Callable[[], Any], timeout: float = 90.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_submit_returns_at_once_and_wait_streams_every_process(source: Path, runs: list[Run]) -> None:
    est = PyTorch(
        source,
        entry_script="hello.py",
        script_params={"--lr": 0.5, "--verbose": ""},
        node_count=2,
        process_count_per_node=2,
        distributed_backend="gloo",
    )
    run = Experiment("hello", project="estimator-tests").submit(est, tags=["it"])
    runs.append(run)
    assert run.get_status() in set(ExperimentStatus)  # the experiment exists when submit returns
    out = io.StringIO()
    details = run.wait_for_completion(show_output=True, output=out)
    assert details["status"] == "succeeded"
    assert details["tags"] == ["it"]
    assert details["topology"] == {"master": 1, "worker": 1, "ps": 0}
    assert [(r["name"], r["exit_code"]) for r in details["replicas"]] == [("master", 0), ("worker-0", 0)]
    text = out.getvalue()
    for rank, replica, local, node in [
        (0, "master", 0, 0),
        (1, "master", 1, 0),
        (2, "worker-0", 0, 1),
        (3, "worker-0", 1, 1),
    ]:
        line = f"PHALANX_REPLICA={replica} RANK={rank} LOCAL_RANK={local} NODE_RANK={node} WORLD_SIZE=4"
        assert line in text
    assert all(ln.startswith(("[master] ", "[worker-0] ")) for ln in text.splitlines())
    assert "argv ['--lr', '0.5', '--verbose']" in text
    assert Run(run.id[:6]).get_status() == ExperimentStatus.SUCCEEDED  # re-attach by id prefix


def test_a_failed_run_raises_with_the_reason_or_returns_its_details(source: Path, runs: list[Run]) -> None:
    est = PyTorch(
        source,
        entry_script="hello.py",
        node_count=2,
        distributed_backend="gloo",
        environment_variables={"FAIL_RANK": "1"},
    )
    run = Experiment("failing", project="estimator-tests").submit(est)
    runs.append(run)
    with pytest.raises(RunFailed) as exc:
        run.wait_for_completion(output=io.StringIO())
    assert exc.value.status == "failed"
    assert "worker-0" in str(exc.value)
    assert "code 3" in str(exc.value)
    details = run.wait_for_completion(raise_on_error=False)
    assert details["status"] == "failed"
    assert any(r["exit_code"] == 3 for r in details["replicas"])


def test_metrics_and_files_of_a_run_can_be_read_and_downloaded(
    source: Path, runs: list[Run], tmp_path: Path
) -> None:
    run = Experiment("report", project="estimator-tests").submit(PyTorch(source, entry_script="report.py"))
    runs.append(run)
    run.wait_for_completion()
    metrics = run.get_metrics()
    assert "system/rss_mib" in metrics  # the supervisor's sampler, beside what the script reported
    reported = {k: v for k, v in metrics.items() if not k.startswith("system/")}
    assert reported == {"loss": {"worker 00": {"steps": [0, 1, 2], "values": [1.0, 0.5, 1.0 / 3]}}}
    everything = run.get_file_names()
    assert "_source/source.tar.gz" in everything  # the source snapshot `phalanx rerun` starts from
    names = [n for n in everything if not n.startswith("_source/")]
    assert len(names) == 1 and names[0].startswith("artifacts/")
    by_name = run.download_file("stats", tmp_path / "stats.json")
    assert json.loads(by_name.read_text()) == {"answer": 42}
    by_path = run.download_file(names[0], tmp_path)
    assert by_path.parent == tmp_path and json.loads(by_path.read_text()) == {"answer": 42}
    with pytest.raises(NotFound, match="no file 'nope'"):
        run.download_file("nope", tmp_path)


def test_cancel_stops_every_replica_and_marks_the_run_stopped(source: Path, runs: list[Run]) -> None:
    est = PyTorch(source, entry_script="sleepy.py", node_count=2, distributed_backend="gloo")
    run = Experiment("sleepy", project="estimator-tests").submit(est)
    runs.append(run)
    wait_until(lambda: all(r["pid"] for r in run.get_details()["replicas"]) and run.get_logs())
    pids = [r["pid"] for r in run.get_details()["replicas"]]
    with pytest.raises(RunTimeout):
        run.wait_for_completion(timeout=0.5)
    assert run.cancel() == ExperimentStatus.STOPPED
    assert run.get_status() == ExperimentStatus.STOPPED
    assert run.cancel() == ExperimentStatus.STOPPED  # idempotent
    with pytest.raises(RunFailed, match="stopped"):
        run.wait_for_completion()
    wait_until(lambda: not any(_alive(p) for p in pids))


def test_a_request_the_machine_cannot_serve_is_refused_by_submit_and_leaves_nothing(
    source: Path, runs: list[Run], phalanx_home: Path
) -> None:
    # This machine has no GPU (a GPU machine would simply run it; then there is nothing to test).
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has a GPU")
    with pytest.raises(UsageError, match="GPU"):
        Experiment("gpu", project="estimator-tests").submit(
            Estimator(source, entry_script="hello.py", use_gpu=True)
        )
    assert not any((phalanx_home / "runs").iterdir())


def test_a_supervisor_too_slow_to_start_is_stopped_and_submit_raises(
    source: Path, runs: list[Run], phalanx_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The supervisor's Python is held at start-up (a sitecustomize that waits, bounded) so it cannot
    # create its row before the deadline, however fast or loaded the machine is.
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "sitecustomize.py").write_text(
        "import time\nend = time.monotonic() + 180\nwhile time.monotonic() < end: time.sleep(0.05)\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(gate), os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    with pytest.raises(PhalanxError, match="did not create experiment"):
        Experiment("slow", project="estimator-tests").submit(
            PyTorch(source, entry_script="hello.py"), timeout=0.5
        )
    assert time.monotonic() - started < 120  # stopped, not the 180 s gate waited out (generous)
    assert not any((phalanx_home / "runs").iterdir())  # stopped, and its folder removed


def test_a_supervisor_that_creates_its_row_just_as_the_deadline_passes_is_stopped_and_erased(
    source: Path, runs: list[Run], phalanx_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race CI met: the caller's first store open is slow, so the row appears between the last
    # look and the stop. The error says the experiment was not created, so none may remain.
    from phalanx.estimators.experiment import _exists
    from phalanx.runner import Runner, StartTimeout

    def late(runner: Runner, exp_id: str, proc: Any, log: Path, timeout: float, **_: Any) -> None:
        wait_until(lambda: _exists(Run(exp_id)))
        raise StartTimeout(f"the supervisor did not create experiment {exp_id} within 0 s", proc)

    monkeypatch.setattr(Runner, "_wait_started", late)
    with pytest.raises(PhalanxError, match="did not create experiment"):
        Experiment("late", project="estimator-tests").submit(PyTorch(source, entry_script="hello.py"))
    assert not any((phalanx_home / "runs").iterdir())  # stopped, its row, spool and folder removed
    assert not list((phalanx_home / "spool").glob("*/*"))
    assert Run("x")._store.list_experiments().total == 0


def test_submit_queues_behind_a_run_holding_every_core_or_refuses_with_wait_false(
    source: Path, runs: list[Run], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    (source / "hold.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)\n"
    )
    (source / "ok.py").write_text("print('ok')\n")
    every_core = {"cpu": len(os.sched_getaffinity(0))}
    holder = Experiment("holder").submit(Estimator(source, entry_script="hold.py", resources=every_core))
    runs.append(holder)
    wait_until(lambda: holder.get_status() is ExperimentStatus.RUNNING)
    small = Estimator(source, entry_script="ok.py", resources={"cpu": 1})
    with pytest.raises(UsageError, match=holder.id):
        Experiment("refused").submit(small, wait=False)
    for wrong in (10**6, 2.5, True):  # refused before anything is written
        with pytest.raises(UsageError, match="from -1000 to 1000"):
            Experiment("wrong").submit(small, priority=wrong)  # type: ignore[arg-type]
    assert len(list((Path(os.environ["PHALANX_HOME"]) / "runs").iterdir())) == 1  # the holder's
    queued = Experiment("queued").submit(small, priority=3)
    runs.append(queued)
    # submit answers once the experiment is recorded (starting); its supervisor then queues it
    wait_until(lambda: queued.get_status() is ExperimentStatus.QUEUED)
    release.touch()
    assert queued.wait_for_completion()["status"] == "succeeded"
    assert holder.wait_for_completion()["status"] == "succeeded"
    assert queued.get_details()["started_at"] >= holder.get_details()["finished_at"]
