"""What a tired user gets wrong with `phalanx rerun` / `phalanx resume`: a refused rerun leaves
nothing behind, and an experiment launched with --extra-params can still be resumed and rerun."""

from __future__ import annotations

import json

import pytest

from phalanx.machine.procs import recorded_process, start_time

from .conftest import Phalanx, experiment_pids

# fails on its first run (no marker yet), succeeds afterwards: a failed experiment to resume
SCRIPT = """
import pathlib, sys
marker = pathlib.Path(sys.argv[1])
if not marker.exists():
    marker.write_text("ran once")
    sys.exit("first attempt fails")
import os, time
time.sleep(float(os.environ.get("SECOND_SLEEP", "0")))  # long enough for the system-metrics sampler
print("second attempt succeeds", flush=True)
"""


def _failed_experiment(phalanx: Phalanx, *extra: str) -> str:
    folder = phalanx.tmp / "exp"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(SCRIPT)
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "train.csv").write_text("x\n")  # skipped by the snapshot
    cmd = f"python train.py {phalanx.tmp}/marker"
    spec = phalanx.spec(f"version: 1\nkind: experiment\nparams:\n  epochs: 2\nrun:\n  cmd: {cmd}\n")
    first = phalanx.run("run", "-f", str(spec), "-o", "json", *extra)
    assert first.returncode == 1, first.stderr[-2000:]
    return str(json.loads(first.stdout)["id"])


def test_a_refused_rerun_writes_nothing_and_extra_params_survive_resume_and_rerun(phalanx: Phalanx) -> None:
    exp_id = _failed_experiment(phalanx, "--param", "note=baseline", "--extra-params")
    store = phalanx.store()
    runs = phalanx.home / "runs"
    before = sorted(p.name for p in runs.iterdir())
    count = store.list_experiments().total

    typo = phalanx.cli("rerun", exp_id, "--param", "epcohs=3")  # refused: in this process
    assert typo.returncode == 2 and "did you mean 'epochs'?" in typo.stderr, typo.stderr
    assert "Traceback" not in typo.stderr
    assert sorted(p.name for p in runs.iterdir()) == before  # no half-written run folder
    assert store.list_experiments().total == count

    # launched with --extra-params: resuming it must not refuse the params it was launched with
    resumed = phalanx.run("resume", exp_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert store.get_experiment(exp_id).status == "succeeded"

    assert resumed.stderr.count("(1 replica, local)") == 1, resumed.stderr  # one headline, not two
    again = phalanx.run("rerun", exp_id, "-o", "json")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("(1 replica, local)") == 1 and f"rerun of {exp_id}" in again.stderr
    assert "the snapshot left out data/: the rerun runs without them" in again.stderr, again.stderr
    # a name only the rerun adds is checked as `phalanx run` checks it, and --extra-params lets it in
    assert phalanx.cli("rerun", exp_id, "--param", "seed=1").returncode == 2
    more = phalanx.run("rerun", exp_id, "--param", "seed=1", "--extra-params", "-o", "json")
    assert more.returncode == 0, more.stderr[-2000:]
    assert store.get_experiment(json.loads(more.stdout)["id"]).plan["params"]["seed"] == 1


def test_resume_of_a_plain_script_run_does_not_point_to_a_rerun_that_would_refuse(phalanx: Phalanx) -> None:
    import subprocess
    import sys

    script = phalanx.tmp / "plain.py"
    script.write_text("from phalanx import Task\nTask.init(project_name='p', task_name='plain')\n")
    # a run that recorded nothing (PHALANX_RECORD_SOURCE=0, or one from before plain scripts recorded)
    quiet = {**phalanx.env, "PHALANX_RECORD_SOURCE": "0"}
    subprocess.run([sys.executable, str(script)], env=quiet, check=True, timeout=120)
    assert phalanx.cli("ls").returncode == 0  # a phalanx command ingests what the script spooled
    exp_id = phalanx.store().list_experiments().items[0].id
    resumed = phalanx.cli("resume", exp_id)  # refused: in this process
    assert resumed.returncode == 2 and "only a failed or stopped one" in resumed.stderr
    assert "phalanx rerun" not in resumed.stderr  # a rerun needs the launch a plain script never records
    assert phalanx.cli("rerun", exp_id).returncode == 2


def test_diff_with_a_run_that_recorded_nothing_does_not_claim_every_package_and_file_changed(
    phalanx: Phalanx,
) -> None:
    import subprocess
    import sys

    script = phalanx.tmp / "plain.py"
    script.write_text("from phalanx import Task\nTask.init(project_name='p', task_name='plain')\n")
    # a run that recorded nothing (PHALANX_RECORD_SOURCE=0, or one from before plain scripts recorded)
    quiet = {**phalanx.env, "PHALANX_RECORD_SOURCE": "0"}
    subprocess.run([sys.executable, str(script)], env=quiet, check=True, timeout=120)
    assert phalanx.cli("ls").returncode == 0
    plain = phalanx.store().list_experiments().items[0].id
    folder = phalanx.tmp / "exp"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text("print('hello')\n")
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python train.py\n")
    ran = phalanx.run("run", "-f", str(spec), "-o", "json")
    assert ran.returncode == 0, ran.stderr[-2000:]
    full = json.loads(ran.stdout)["id"]

    doc = json.loads(phalanx.cli("diff", plain, full, "-o", "json").stdout)
    assert doc["packages"] == {} and doc["code"] == [] and doc["file"] == [] and doc["versions"] == {}
    assert doc["unrecorded"] == {"a": ["environment", "source snapshot", "experiment file"]}
    text = phalanx.cli("diff", full, plain)
    assert text.returncode == 0
    assert f"not compared: {plain} recorded no environment, source snapshot, experiment file" in text.stdout
    assert "print('hello')" not in text.stdout  # not shown as a file the other run lacks


def test_resume_and_rerun_detach_return_at_once_and_run_in_the_background(phalanx: Phalanx) -> None:
    """An 11-hour job is resumed in the background, as `phalanx run -d` starts one; a rerun of it
    with another param likewise prints the new id and runs in the background. (One failed
    experiment for both: a rerun is a new experiment, which leaves the original's attempts alone.)"""
    from .conftest import wait_for

    exp_id = _failed_experiment(phalanx)
    store = phalanx.store()
    runs = phalanx.home / "runs"
    refused = phalanx.cli("resume", "-d", "nope")  # refused: in this process
    assert refused.returncode == 2 and "no experiment 'nope'" in refused.stderr
    before = sorted(p.name for p in runs.iterdir())
    typo = phalanx.cli("rerun", "-d", exp_id, "--param", "epcohs=3")  # refused: in this process
    assert typo.returncode == 2 and "did you mean 'epochs'?" in typo.stderr, typo.stderr
    assert sorted(p.name for p in runs.iterdir()) == before  # refused before going to the background

    started = phalanx.run("rerun", "-d", exp_id, "--param", "epochs=5")
    assert started.returncode == 0, started.stderr[-2000:]
    new_id = started.stdout.strip()
    assert new_id != exp_id and len(new_id) == 12
    resumed = phalanx.run("resume", "-d", exp_id)  # while the rerun runs
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert resumed.stdout.strip() == exp_id

    wait_for(lambda: store.get_experiment(new_id).status == "succeeded", what="the detached rerun")
    rerun = store.get_experiment(new_id)
    assert rerun.plan["params"]["epochs"] == 5
    assert (store.repro(new_id).get("launch") or {}).get("rerun_of") == exp_id
    assert "rerun of" in (runs / new_id / "supervisor.log").read_text()
    wait_for(lambda: store.get_experiment(exp_id).status == "succeeded", what="the resumed run")
    assert [a["kind"] for a in store.attempts(exp_id)] == ["start", "resume"]
    for one in (new_id, exp_id):
        wait_for(
            lambda one=one: not experiment_pids(phalanx.home, one), what="the background supervisor's end"
        )


def test_of_two_resumes_at_once_one_wins_and_the_other_says_so_leaving_the_winner_stoppable(
    phalanx: Phalanx,
) -> None:
    """Two teammates press resume together: exactly one resume runs; the other exits non-zero with
    the reason and does not take away the pid record through which `phalanx stop` reaches the winner."""
    import fcntl
    import os
    import subprocess

    from .conftest import PHALANX, wait_for

    phalanx.env["SECOND_SLEEP"] = "600"
    exp_id = _failed_experiment(phalanx)
    store = phalanx.store()
    # the race at its closest: both supervisors passed `resume`'s own status check and wait for
    # the reopen lock together; the test holds it until both are queued on it (/proc/locks)
    lock_path = phalanx.home / "runs" / exp_id / "resume.lock"
    with open(lock_path, "a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        both = [
            subprocess.Popen(
                [*PHALANX, "resume", "-d", exp_id],
                env=phalanx.env,
                cwd=phalanx.tmp,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        inode = f":{os.stat(lock_path).st_ino} "

        def waiting_on_the_lock() -> int:
            with open("/proc/locks") as locks:
                return sum(1 for line in locks if "->" in line and inode in line)

        wait_for(lambda: waiting_on_the_lock() == 2, what="both resumes at the reopen lock")
    results = [(p.wait(timeout=180), *p.communicate()) for p in both]
    codes = sorted(code for code, _, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    won = next(out for code, out, _ in results if code == 0)
    lost = next(err for code, _, err in results if code != 0)
    assert won.strip() == exp_id
    assert "only a failed or stopped one can be resumed" in lost, lost
    assert "running (" not in lost  # only its own message, not the winner's lines
    assert [a["kind"] for a in store.attempts(exp_id)] == ["start", "resume"]
    wait_for(lambda: store.get_experiment(exp_id).status == "running", what="the winning resume")
    winner = recorded_process(phalanx.home / "runs" / exp_id / "supervisor.pid")
    assert winner is not None
    stopped = phalanx.cli("stop", exp_id)
    assert stopped.returncode == 0, stopped.stderr
    assert store.get_experiment(exp_id).status == "stopped"
    wait_for(lambda: not experiment_pids(phalanx.home, exp_id), what="the winner's replicas' end")
    wait_for(lambda: start_time(winner) is None, what="the winning supervisor's end")


def test_resume_keeps_no_system_metrics(phalanx: Phalanx) -> None:
    phalanx.env["SECOND_SLEEP"] = "2.5"
    exp_id = _failed_experiment(phalanx, "--no-system-metrics")
    resumed = phalanx.run("resume", exp_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    titles = phalanx.store().metric_titles(exp_id)
    assert not [t for t in titles if t.startswith("system/")], titles


def test_a_resume_finding_the_experiment_reopened_by_another_leaves_the_pid_record_alone(
    phalanx: Phalanx, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of two resumes, deterministically: this supervisor passed `phalanx resume`'s own
    status check, then another resume reopened the experiment first. It must refuse without once
    rewriting runs/<id>/supervisor.pid: a `resume -d` reads that file to tell its own supervisor's
    reopen from another's, and a moment naming the loser made both report success (CI, stop 22)."""
    import subprocess
    import sys

    from phalanx import supervisor
    from phalanx.config import Settings
    from phalanx.errors import Conflict
    from phalanx.spec.loader import load_spec_text
    from phalanx.supervisor.opener import LazyStore

    exp_id = _failed_experiment(phalanx)
    store = phalanx.store()
    experiment = store.get_experiment(exp_id)
    launch = store.repro(exp_id)["launch"]
    pid_file = phalanx.home / "runs" / exp_id / "supervisor.pid"
    winner = subprocess.Popen(  # the other resume: its record, then its reopen
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from phalanx.machine.procs import record_process;"
            " record_process(Path(sys.argv[1])); print('recorded', flush=True); time.sleep(120)",
            str(pid_file),
        ],
        env=phalanx.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert winner.stdout is not None and winner.stdout.readline().strip() == "recorded"
        store.reopen_experiment(exp_id)
        before = pid_file.stat()
        for name, value in phalanx.env.items():
            if name.startswith("PHALANX_"):
                monkeypatch.setenv(name, value)
        settings = Settings()
        spec = load_spec_text(experiment.spec_text, "<stored file>", launch.get("params"), extra_params=True)
        prepared = supervisor.prepare(
            spec, settings=settings, workdir=launch["workdir"], experiment_id=exp_id, launch=launch
        )
        loser = supervisor.Supervisor(prepared, LazyStore(store), settings, handle_signals=False, resume=True)
        with pytest.raises(Conflict, match="only a failed or stopped one can be resumed"):
            loser.run()
        after = pid_file.stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        assert recorded_process(pid_file) == winner.pid
        assert store.get_experiment(exp_id).status == "starting"  # the winner's, untouched
    finally:
        winner.kill()
        winner.wait()
