"""One launch path: ``Experiment.submit`` starts its experiment's supervisor directly (`python -m
phalanx.runner`), from the validated spec: no `phalanx` CLI process, and exactly one new process
per experiment; `phalanx run --detach` and a group's controller fork their supervisors (no Python
start-up at all); a HyperDrive sweep starts its group's controller directly.

Every Python process the test's commands start records itself (pid, parent, argv) through a
``sitecustomize`` on PYTHONPATH, so a process that ended before anyone looked is counted too.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.estimator.conftest import stop_group
from tests.integration.local.conftest import Phalanx, wait_for

from phalanx.machine.locks import held
from phalanx.runner.options import LAUNCH_LOCK

TRACER = Path(__file__).parent / "launch_trace"
# A replica that says whether its run folder's launch lock is held (by its supervisor, alive) and
# whether the replica itself has it open (it must not: only the supervisor holds it)
LOOK = """\
import os, sys
from pathlib import Path
from phalanx.machine.locks import held
lock = Path(os.environ["PHALANX_HOME"], "runs", os.environ["PHALANX_EXPERIMENT_ID"], "launch.lock")
fds = [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
print(f"launch lock held: {held(lock)}, open here: {str(lock.resolve()) in fds}", flush=True)
pid = os.getppid()  # its reaper's, then the supervisor's command line as `ps` shows them
for _ in range(3):
    title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\\0", b" ").decode().strip()
    print("ancestor:", title)
    if title.startswith("phalanx replica"):  # a forked reaper keeps none of its supervisor's fds
        held_there = [os.path.realpath(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        print(f"open by its reaper: {str(lock.resolve()) in held_there}", flush=True)
    pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
"""
SUPERVISOR = ["-P", "-m", "phalanx.runner"]  # -P: never the folder it starts in on its path


def _traced(phalanx: Phalanx, monkeypatch: pytest.MonkeyPatch) -> Path:
    trace = phalanx.tmp / "launch-trace.jsonl"
    path = os.pathsep.join([str(TRACER), phalanx.env["PYTHONPATH"]])
    phalanx.env.update(PYTHONPATH=path, LAUNCH_TRACE=str(trace))
    monkeypatch.setenv("PYTHONPATH", path)  # Experiment.submit from this process
    monkeypatch.setenv("LAUNCH_TRACE", str(trace))
    return trace


def _processes(trace: Path) -> list[tuple[int, int, list[str]]]:
    return [tuple(json.loads(line)) for line in trace.read_text().splitlines()]  # type: ignore[misc]


def _is_cli(argv: list[str]) -> bool:
    return any("phalanx.cli" in a or a.endswith("/phalanx") for a in argv)


def _children(trace: Path, parent: int) -> list[list[str]]:
    return [argv for _pid, ppid, argv in _processes(trace) if ppid == parent]


def _argv(trace: Path, pid: int) -> list[str]:
    (argv,) = [a for p, _ppid, a in _processes(trace) if p == pid]
    return argv


def _the_cli(trace: Path) -> int:
    (cli,) = [pid for pid, _ppid, argv in _processes(trace) if _is_cli(argv)]
    return cli


def test_run_detach_starts_the_supervisor_and_nothing_else(
    phalanx: Phalanx, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _traced(phalanx, monkeypatch)
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python look.py\n")
    (spec.parent / "look.py").write_text(LOOK)
    done = phalanx.run("run", "--detach", "-o", "json", "-f", str(spec))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    cli = _the_cli(trace)  # the `phalanx run --detach` the test typed, and no other CLI process
    # its supervisor is forked from it (runner.forking: the file validated and the modules imported
    # once for the whole submission), so no Python process starts before the replica's own
    got = phalanx.cli("logs", doc["id"], "--follow")
    assert _children(trace, cli) == [], _children(trace, cli)
    started = _processes(trace)
    assert len([argv for _pid, _ppid, argv in started if "look.py" in argv]) == 1, started  # the replica
    assert doc["supervisor_pid"] not in [pid for pid, _ppid, _argv in started], started
    assert [argv for _pid, _ppid, argv in _processes(trace) if _is_cli(argv)] == [_argv(trace, cli)]
    # the run folder's launch lock: held by the supervisor while it runs, not by its replica
    assert "launch lock held: True, open here: False" in got.stdout, got.stdout + got.stderr
    # `ps` names it for what it is, not for the command it was forked from
    assert f"ancestor: phalanx supervisor {doc['id']}\n" in got.stdout, got.stdout
    # and the replica's reaper is forked from the supervisor in turn (machine.forks): no `python -I`
    assert f"ancestor: phalanx replica {doc['id']} master\n" in got.stdout, got.stdout
    assert "open by its reaper: False" in got.stdout, got.stdout  # the supervisor's lock stays its own
    lock = phalanx.home / "runs" / doc["id"] / LAUNCH_LOCK  # let go when the supervisor exits
    wait_for(lambda: not held(lock), what="the supervisor's exit to free its launch lock")


def test_run_detach_leaves_no_pipe_its_caller_handed_it_open(phalanx: Phalanx) -> None:
    """`out=$(phalanx run --detach ... 3>&1)`: the write end of a pipe the command was handed beside
    its output is not held by the supervisor it forks (for its job's whole life), so the caller's
    read ends when the command does, as it did when the supervisor was a process of its own."""
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: sleep 600\n")
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    cli = subprocess.Popen(
        [sys.executable, "-m", "phalanx.cli.main", "run", "--detach", "-o", "json", "-f", str(spec)],
        env=phalanx.env,
        stdout=subprocess.PIPE,
        pass_fds=(write_end,),
    )
    os.close(write_end)
    out, _ = cli.communicate(timeout=180)
    assert cli.returncode == 0
    started = json.loads(out)
    try:
        # every holder of the write end gone: end of file (the sleeping job's supervisor would hold it)
        assert select.select([read_end], [], [], 60)[0] == [read_end]
        assert os.read(read_end, 1) == b""
    finally:
        os.close(read_end)
        assert phalanx.cli("stop", started["id"]).returncode == 0


def test_experiment_submit_starts_the_supervisor_and_nothing_else(
    phalanx: Phalanx, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phalanx.estimators import Estimator, Experiment

    trace = _traced(phalanx, monkeypatch)
    source = phalanx.tmp / "src"
    source.mkdir()
    (source / "hello.py").write_text("print('hello')\n")
    run = Experiment("one-path").submit(Estimator(source, entry_script="hello.py"))
    try:
        assert run.wait_for_completion(timeout=120)["status"] == "succeeded"
    finally:
        assert run._process is not None
        stop_group(run._process)
    (child,) = _children(trace, os.getpid())
    assert child[1:4] == SUPERVISOR, child
    assert not [argv for _pid, _ppid, argv in _processes(trace) if _is_cli(argv)]
    assert child[0] == sys.executable


def test_a_group_trial_starts_its_supervisor_and_nothing_else(
    phalanx: Phalanx, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("optuna")
    trace = _traced(phalanx, monkeypatch)
    folder = phalanx.tmp / "group"
    folder.mkdir()
    (folder / "train.py").write_text(LOOK + "print('x', sys.argv[1])\n")
    path = folder / "group.yml"
    path.write_text(
        "version: 1\nkind: group\nname: trace\nhptuning:\n  concurrency: 2\n  grid_search: {}\n"
        "  matrix:\n    x: {values: [1, 2]}\nrun:\n  cmd: python train.py {{ x }}\n"
    )
    done = phalanx.run("group", "run", "-f", str(path), "--json", timeout=180)
    assert done.returncode == 0, done.stderr
    trials = json.loads(done.stdout)["trials"]
    assert sorted(t["state"] for t in trials) == ["done", "done"], trials
    controller = _the_cli(trace)  # `phalanx group run` itself: the trials start no CLI process
    # each trial's supervisor is forked from the controller (runner.forking): no Python start-up
    # at all, so no process of the trials' supervisors appears in the trace, and no CLI either
    assert _children(trace, controller) == [], _children(trace, controller)
    assert [argv for _pid, _ppid, argv in _processes(trace) if _is_cli(argv)] == [_argv(trace, controller)]
    # the sampled values are the trial's launch params (`phalanx get TRIAL -o json`) and its params
    for t in trials:
        got = phalanx.cli("get", t["experiment_id"], "-o", "json")
        assert json.loads(got.stdout)["launch"]["params"] == t["params"], got.stdout
        params = phalanx.cli("params", t["experiment_id"], "-o", "json")
        assert json.loads(params.stdout) == {"Trial": t["params"]}, params.stdout + params.stderr
        # a forked supervisor keeps the launch lock the controller took for it, its replica has none
        logs = phalanx.cli("logs", t["experiment_id"]).stdout
        assert "launch lock held: True, open here: False" in logs, logs
        assert f"ancestor: phalanx supervisor {t['experiment_id']}\n" in logs, logs


def test_an_estimator_sweep_starts_its_groups_controller_and_no_cli(
    phalanx: Phalanx, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HyperDrive's submit records the group and starts its controller (`python -m phalanx.groups
    ID`) through GroupLauncher, as `phalanx group run --detach` does: no `phalanx` CLI is run and
    no group id is read from a process's output."""
    pytest.importorskip("optuna")
    from phalanx.estimators import Estimator, Experiment
    from phalanx.estimators.sweep import GridParameterSampling, HyperDriveConfig, PrimaryMetricGoal, choice

    trace = _traced(phalanx, monkeypatch)
    source = phalanx.tmp / "sweep"
    source.mkdir()
    (source / "train.py").write_text(
        "import sys\nfrom phalanx import log_metrics\nlog_metrics(step=1, loss=float(sys.argv[2]))\n"
    )
    config = HyperDriveConfig(
        estimator=Estimator(source, entry_script="train.py"),
        hyperparameter_sampling=GridParameterSampling({"--x": choice(2, 1)}),
        primary_metric_name="loss",
        primary_metric_goal=PrimaryMetricGoal.MINIMIZE,
        max_total_runs=2,
        max_concurrent_runs=2,
    )
    group = Experiment("one-path").submit(config)  # type: ignore[arg-type]
    try:
        details = group.wait_for_completion(timeout=180)
    finally:
        controller = getattr(group, "_process", None)  # the controller this process started, if any
        if controller is not None:
            stop_group(controller)
    assert details["status"] == "succeeded" and details["best"]["params"] == {"x": 1}, details
    (child,) = _children(trace, os.getpid())
    assert child == [sys.executable, "-P", "-m", "phalanx.groups", group.id], child
    assert not [argv for _pid, _ppid, argv in _processes(trace) if _is_cli(argv)]


def test_the_experiment_row_exists_before_its_ledger_entry(
    phalanx: Phalanx, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`phalanx queue` reads the ledger: an entry whose experiment `phalanx get` does not know yet
    (or never will, its supervisor killed between the two) must not exist. The row comes first."""
    from phalanx import queue
    from phalanx.config import Settings
    from phalanx.domain import ExperimentStatus
    from phalanx.errors import NotFound
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.spec.loader import load_spec
    from phalanx.store import open_store

    seen: list[str] = []
    admit = queue.Admission.admit

    def checked(self: queue.Admission, *args: object, **kwargs: object) -> object:
        try:
            row = open_store(Settings()).get_experiment(self.experiment_id)
            seen.append(str(row.status))
        except NotFound:
            seen.append("no row")
        return admit(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(queue.Admission, "admit", checked)
    path = phalanx.spec(
        "version: 1\nkind: experiment\nenvironment:\n  resources: {cpu: {requests: 1, limits: 1}}\n"
        "run:\n  cmd: python -c \"print('ok')\"\n"
    )
    outcome = Runner(Settings()).run(load_spec(path), LaunchOptions(), handle_signals=False)
    assert outcome.status is ExperimentStatus.SUCCEEDED, outcome.reason
    assert seen == ["starting"]
