"""A careless user's mistakes: each one is `error: ...` (where, what, how to fix), exit status 2
(1 for what is not the user's doing), no traceback, and nothing half-written.

The commands run in this process (tests/support/cli.py), `phalanx run` too where it only makes an
experiment to read (its replica is a process); what needs a process of its own (a script, a
supervisor to kill, a pipe closed under `phalanx run`) starts one."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import Done, phalanx_cli
from tests.support.sandbox import wait_for

from phalanx.cli import main as cli_main
from phalanx.machine.ports import free_port

PHALANX = Path(sys.executable).parent / "phalanx"
HELLO = (
    "version: 1\nkind: experiment\nname: hello\nrun:\n  cmd: python -c \"print('hello from the replica')\"\n"
)


def phalanx_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`phalanx ARGS` as a process of its own: what runs an experiment."""
    return subprocess.run([str(PHALANX), *map(str, args)], capture_output=True, text=True, timeout=120)


def assert_user_error(done: Done | subprocess.CompletedProcess[str], message: str, status: int = 2) -> None:
    assert done.returncode == status, done.stderr
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert "error: error:" not in done.stderr


@pytest.fixture
def hello(tmp_path: Path) -> Path:
    path = tmp_path / "polyaxonfile.yml"
    path.write_text(HELLO)
    return path


def test_detached_run_mistakes_are_reported_once_with_status_2_and_leave_no_run_folder(
    phalanx_home: Path, hello: Path
) -> None:
    for args, message in [
        (("--workdir", hello.parent / "nope"), "--workdir"),
        (("--cluster", "nope"), "no cluster named 'nope'"),
    ]:
        done = phalanx_cli("run", "-f", hello, "--detach", *args)
        assert_user_error(done, message)
        assert done.stderr.count("error:") == 1, done.stderr
    runs = phalanx_home / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_yaml_output_without_dry_run_is_refused_before_anything_runs(phalanx_home: Path, hello: Path) -> None:
    done = phalanx_cli("run", "-f", hello, "-o", "yaml")
    assert_user_error(done, "-o yaml shows what --dry-run would submit")
    assert "hello from the replica" not in done.stdout
    done = phalanx_cli("run", "-f", hello, "--dry-run", "-o", "yaml")
    assert_user_error(done, "-o yaml: the local engine has no YAML to show")
    assert done.stdout == ""


def test_a_phalanx_home_that_is_a_file_is_an_error_naming_it(tmp_path: Path, hello: Path) -> None:
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    env = {"PHALANX_HOME": str(home)}
    assert_user_error(phalanx_cli("ls", env=env), f"PHALANX_HOME ({home}) must be a folder")
    done = phalanx_cli("run", "-f", hello, env=env)
    assert_user_error(done, f"PHALANX_HOME {home} is a file")
    assert "hello from the replica" not in done.stdout


def test_a_garbage_database_url_stops_run_before_any_replica_starts(phalanx_home: Path, hello: Path) -> None:
    done = phalanx_cli("run", "-f", hello, env={"PHALANX_DB_URL": "garbage"})
    assert_user_error(done, "PHALANX_DB_URL 'garbage' is not a database URL")
    assert "hello from the replica" not in done.stdout


def test_a_ulimit_too_low_to_supervise_is_refused_before_anything_starts(
    phalanx_home: Path, hello: Path
) -> None:
    # a process: the limit is its own; under ~20 open files a run lost lines or failed half-way
    for detach in ([], ["--detach"]):
        low = f"ulimit -n 16 && exec {PHALANX} run -f {hello} {' '.join(detach)}"
        done = subprocess.run(["bash", "-c", low], capture_output=True, text=True, timeout=120)
        assert_user_error(done, "lets a process open 16 files (`ulimit -n`); a run needs at least 64")
        assert "hello from the replica" not in done.stdout
    for folder in (phalanx_home / "runs", phalanx_home / "spool"):
        assert not folder.exists() or not any(folder.iterdir()), list(folder.iterdir())
    ran = phalanx_process("run", "-f", hello, "-o", "json")
    assert ran.returncode == 0, ran.stderr
    first = json.loads(ran.stdout)["id"]
    for again in (f"rerun {first}", f"resume {first}"):
        done = subprocess.run(
            ["bash", "-c", f"ulimit -n 16 && exec {PHALANX} {again}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert_user_error(done, "lets a process open 16 files (`ulimit -n`); a run needs at least 64")
    assert [p.name for p in (phalanx_home / "runs").iterdir()] == [first]


def test_too_many_open_files_mid_command_is_one_line_naming_the_limit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def runs_out() -> None:
        raise OSError(errno.EMFILE, "Too many open files", "/home/u/.phalanx/spool/x.spool")

    with pytest.raises(SystemExit) as ended:
        cli_main._answer(runs_out, ["run"])
    assert ended.value.code == 1
    said = capsys.readouterr().err
    assert said.startswith("error: too many open files (/home/u/.phalanx/spool/x.spool)"), said
    assert "`ulimit -n`); raise it" in said


def test_an_unreachable_database_is_named_without_its_password(phalanx_home: Path, hello: Path) -> None:
    url = f"postgresql+psycopg://nobody:s3cret@127.0.0.1:{free_port()}/x"
    for args in (("ls",), ("run", "-f", hello)):
        done = phalanx_cli(*args, env={"PHALANX_DB_URL": url})
        assert_user_error(
            done, "cannot open the database postgresql+psycopg://nobody:***@127.0.0.1", status=69
        )  # as a server that cannot be reached: nothing started, nothing failed
        assert "start the database server or fix PHALANX_DB_URL" in done.stderr
        assert "s3cret" not in done.stderr
    # the run recorded nothing, so it leaves nothing behind
    for folder in (phalanx_home / "runs", phalanx_home / "spool"):
        assert not folder.exists() or not any(folder.iterdir()), list(folder.iterdir())


def test_server_refuses_a_port_in_use_an_unknown_host_and_a_bad_log_level(phalanx_home: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert_user_error(phalanx_cli("server", "--port", str(port)), f"cannot listen on 127.0.0.1:{port}")
    done = phalanx_cli("server", "--host", "nosuch.invalid", env={"PHALANX_TOKEN": "t"})
    assert_user_error(done, "--host nosuch.invalid")
    done = phalanx_cli("server", "--log-level", "loud")
    assert done.returncode == 2 and "'loud' is not one of" in done.stderr and "Traceback" not in done.stderr


def test_metrics_of_an_unknown_series_and_logs_as_yaml_are_errors(phalanx_home: Path, hello: Path) -> None:
    # the run in this process too: its replica is a real process (`run`'s own smoke is below)
    assert phalanx_cli("run", "-f", hello, "--experiment-id", "aaaaaaaaaaa1").returncode == 0
    assert_user_error(phalanx_cli("metrics", "aaaa", "--series", "nope"), "has no metric series 'nope'")
    assert_user_error(phalanx_cli("logs", "aaaa", "-o", "yaml"), "'yaml' is not one of 'text', 'json'")


def test_ctrl_c_while_starting_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "_register", interrupted)
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["queue"])  # a Typer command (a plain `ls` never imports the Typer app)
    assert exit_.value.code == 130
    assert "interrupted" in capsys.readouterr().err


def test_a_read_only_phalanx_home_is_an_error_that_names_the_fix(
    phalanx_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from phalanx.cli import app as cli_app

    def read_only(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(phalanx_home / "artifacts"))

    monkeypatch.setattr(cli_main, "_register", lambda *_args: None)
    monkeypatch.setattr(cli_app, "app", read_only)
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["queue"])  # a Typer command (a plain `ls` never imports the Typer app)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"error: cannot use {phalanx_home / 'artifacts'}: Read-only file system" in err
    assert "must be a folder you can write to" in err


def test_logs_follow_ends_when_the_supervisor_was_killed_instead_of_waiting_forever(
    phalanx_home: Path, tmp_path: Path
) -> None:
    import signal
    import time

    path = tmp_path / "sleeper.yml"
    path.write_text(
        "version: 1\nkind: experiment\nrun:\n  cmd: python -c \"import time; print('up', flush=True); "
        'time.sleep(120)"\n'
    )
    exp_id = phalanx_process("run", "-f", path, "--detach").stdout.strip()
    pid_file = phalanx_home / "runs" / exp_id / "supervisor.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
    try:
        done = phalanx_cli("logs", "-f", exp_id)
        assert done.returncode == 1, done.stderr
        assert f"the supervisor of experiment {exp_id} is gone" in done.stderr
        assert f"phalanx stop {exp_id}" in done.stderr
    finally:
        phalanx_cli("stop", exp_id)


def test_run_piped_into_head_runs_to_the_end_without_a_traceback(phalanx_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "chatty.yml"
    path.write_text(
        'version: 1\nkind: experiment\nrun:\n  cmd: python -c "[print(i) for i in range(20000)]"\n'
    )
    proc = subprocess.Popen(
        [str(PHALANX), "run", "-f", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
    assert "succeeded" in err


def test_a_cluster_that_refuses_the_job_leaves_no_run_folder_behind(phalanx_home: Path, hello: Path) -> None:
    """A Kubernetes cluster without a kubeconfig: the submit fails before the experiment is recorded."""
    assert (
        phalanx_cli(
            "cluster", "add", "k8s", "--kind", "kubernetes", "--server-url", "http://p:8000"
        ).returncode
        == 0
    )
    done = phalanx_cli("run", "-f", hello, "--cluster", "k8s", env={"KUBECONFIG": str(phalanx_home / "none")})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "error:" in done.stderr
    for folder in (phalanx_home / "runs", phalanx_home / "spool"):
        assert not folder.exists() or not any(folder.iterdir()), list(folder.iterdir())


def test_stop_of_a_plain_script_ends_it_and_a_killed_one_is_marked_failed_and_can_be_deleted(
    phalanx_home: Path, tmp_path: Path
) -> None:
    import signal

    script = tmp_path / "plain.py"
    script.write_text(
        "import time\nfrom phalanx import Task\ntask = Task.init(project_name='qa', task_name='plain')\n"
        "print('up', task.id, flush=True)\ntime.sleep(120)\n"
    )
    # both start at once (a Python start each): the first is stopped alive, the second killed
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True) for _ in "ab"]
    try:
        ids = []
        for proc in procs:
            assert proc.stdout is not None
            up, exp_id = proc.stdout.readline().split()
            assert up == "up"
            ids.append(exp_id)

        def listed() -> bool:  # each script's ingester writes its experiment
            return set(ids) <= {e["id"] for e in json.loads(phalanx_cli("ls", "-o", "json").stdout)}

        wait_for(listed, what="the two scripts' experiments listed")
        alive, killed = procs
        done = phalanx_cli("stop", ids[0])  # alive: SIGTERM, and it ends
        assert done.returncode == 0, done.stderr
        assert alive.wait(timeout=60) != 0
        killed.send_signal(signal.SIGKILL)  # killed: the next reader marks it failed, saying how
        killed.wait(timeout=60)
        followed = phalanx_cli("logs", "-f", ids[1])  # ends instead of following forever
        assert followed.returncode == 0 and "up" in followed.stdout, followed.stderr
        shown = json.loads(phalanx_cli("get", ids[1], "-o", "json").stdout)
        assert shown["status"] == "failed"
        assert "ended without recording its end" in shown["reason"]
        assert phalanx_cli("delete", ids[1], "--yes").returncode == 0
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=60)


def test_logs_follow_of_a_killed_plain_script_whose_ingester_died_too_marks_it_failed_and_ends(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """Nothing is left to record the script's end (its detached ingester is SIGKILLed as well):
    `logs -f` judges it as `phalanx get` would, prints the lines and ends with 0, instead of
    exiting 1 with "the script is gone" (what it did whenever it looked before the ingester)."""
    import signal
    import time

    script = tmp_path / "plain.py"
    script.write_text(
        "import os, time\nfrom phalanx import Task\nTask.init(project_name='qa', task_name='plain')\n"
        "print('up', os.environ['PHALANX_INGESTER_PID'], flush=True)\ntime.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ingester = int(proc.stdout.readline().split()[1])
        assert ingester > 0
        deadline = time.monotonic() + 60
        exp_id = None
        while time.monotonic() < deadline:  # the line is in the store: the ingester relayed it
            listed = json.loads(phalanx_cli("ls", "-o", "json").stdout)
            if listed:
                exp_id = listed[0]["id"]
                if "up" in phalanx_cli("logs", exp_id).stdout:
                    break
            time.sleep(0.2)
        assert exp_id is not None
        os.kill(ingester, signal.SIGKILL)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        followed = phalanx_cli("logs", "-f", exp_id)
        assert followed.returncode == 0, followed.stderr
        assert "up" in followed.stdout
        shown = json.loads(phalanx_cli("get", exp_id, "-o", "json").stdout)
        assert shown["status"] == "failed"
        assert "ended without recording its end" in shown["reason"]
    finally:
        proc.kill()
        proc.wait(timeout=60)


def test_an_artifacts_url_fsspec_cannot_open_is_a_usage_error(phalanx_home: Path) -> None:
    done = phalanx_cli("ls", env={"PHALANX_ARTIFACTS_URL": "garbage://x"})
    assert_user_error(done, "PHALANX_ARTIFACTS_URL 'garbage://x': Protocol not known: garbage")


def test_ls_with_a_filter_matching_nothing_does_not_claim_there_are_no_experiments(
    phalanx_home: Path, hello: Path
) -> None:
    assert phalanx_cli("run", "-f", hello).returncode == 0  # in this process; its replica is real
    done = phalanx_cli("ls", "--project", "nope")
    assert done.returncode == 0
    assert "no experiments match" in done.stdout and "no experiments yet" not in done.stdout


def test_run_and_check_of_stdin_a_folder_or_a_missing_file_say_so_once(
    phalanx_home: Path, tmp_path: Path
) -> None:
    for command in ("run", "check"):
        assert_user_error(phalanx_cli(command, "-f", "-"), "cannot come from stdin")
        for path, message in ((tmp_path, "is a directory"), (tmp_path / "nope.yml", "no such file")):
            done = phalanx_cli(command, "-f", path)
            assert_user_error(done, message)
            assert done.stderr.count("\n") == 1, done.stderr


def test_server_refuses_a_short_token_on_an_address_other_machines_reach() -> None:
    """Throttling is per client address: a short token on 0.0.0.0 could still be guessed from many."""
    done = phalanx_cli(
        "server", "--host", "0.0.0.0", "--port", str(free_port()), env={"PHALANX_TOKEN": "short-token"}
    )
    assert_user_error(done, "too easy to guess")
    assert "secrets.token_urlsafe" in done.stderr


@pytest.mark.parametrize(
    ("how", "value"), [("option", "my-proxy"), ("env", "10.0.0.1,10.0.0.300"), ("option", "10.0.0.0/33")]
)
def test_server_refuses_forwarded_allow_ips_that_are_no_addresses(how: str, value: str) -> None:
    args = ["server", "--port", str(free_port())]
    env = {"PHALANX_TOKEN": ""}
    if how == "option":
        args += ["--forwarded-allow-ips", value]
    else:
        env["PHALANX_FORWARDED_ALLOW_IPS"] = value
    done = phalanx_cli(*args, env=env)
    assert_user_error(done, "is not an IP address or network")
    assert ("--forwarded-allow-ips" if how == "option" else "PHALANX_FORWARDED_ALLOW_IPS") in done.stderr


def test_resume_or_rerun_of_an_experiment_that_never_left_the_queue_says_so(phalanx_home: Path) -> None:
    """A `phalanx run` SIGKILLed while it waited in the queue leaves a stopped experiment that never
    started; `phalanx resume`/`rerun` of it used to blame a record 'without its launch details'
    and send the user to `phalanx run -f FILE` without saying which file or params."""
    from phalanx.domain import ExperimentStatus
    from phalanx.store import open_store

    store = open_store()
    exp = store.create_experiment(
        name="sleeper",
        project="default",
        status=ExperimentStatus.QUEUED,
        spec_text=HELLO,
        plan={"launch": {"file": "/data/my runs/train.yml", "params": {"lr": 0.1, "tag": "a b"}}},
    )
    store.update_experiment(exp.id, status=ExperimentStatus.STOPPED)
    for command in ("resume", "rerun"):
        done = phalanx_cli(command, exp.id)
        said = f"experiment {exp.id} never started (it was stopped while it waited in the queue)"
        assert_user_error(done, said)
        assert "phalanx run -f '/data/my runs/train.yml' --param lr=0.1 --param 'tag=a b'" in done.stderr
        assert "without its launch details" not in done.stderr


@pytest.mark.parametrize(
    ("args", "fixed"),
    [
        (["run", "train.yml", "-d"], "phalanx run -f train.yml -d"),
        (["check", "train.yaml"], "phalanx check -f train.yaml"),
        (["group", "run", "--param", "lr=0.1", "sweep.yml"], "phalanx group run --param lr=0.1 -f sweep.yml"),
    ],
)
def test_a_file_named_without_f_gets_the_command_to_type(args: list[str], fixed: str) -> None:
    """`phalanx run train.yml` used to get typer's "Missing option '-f' / '--file'" alone, as if no
    file had been given."""
    done = phalanx_cli(*args)
    assert done.returncode == 2
    assert (
        done.stderr
        == f"error: {args[-1] if args[-1] != '-d' else args[1]}: give the file with -f: `{fixed}`\n"
    )


def test_a_priority_beyond_the_bound_is_refused_before_anything_starts(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """`--priority 99999999999999999999` used to be queued as given: no waiting run could ever age
    past it. The bound says what the scale is."""
    spec = tmp_path / "hello.yml"
    spec.write_text(HELLO)
    done = phalanx_cli("run", "-f", spec, "--priority", "99999999999999999999", "-d")
    assert_user_error(done, "--priority 99999999999999999999: give a whole number from -1000 to 1000")
    assert not (phalanx_home / "runs").exists() or not any((phalanx_home / "runs").iterdir())
