"""After `phalanx login URL`, commands work on a real `phalanx server` on loopback: `phalanx run -f`
submits there (`--local` keeps this machine, and each says which it uses), and every read and
control command prints what it prints on the server's own machine. The server is a process of its
own; the client commands run in this process (tests/support/cli.py), except those that run an
experiment or a group on this machine, which the `phalanx` script runs."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import (
    PHALANX,
    Server,
    clean_env,
    running_server,
    start_server,
    stop_server,
    supervisors_gone,
)
from tests.support.cli import Done, phalanx_cli

import phalanx as phalanx_api

DATA = Path(__file__).parent / "data" / "remote"
TOKEN = "remote-commands-token-0123456789"


def phalanx(home: Path, *args: str, token: str | None = None, stdin: str | None = None) -> Done:
    """`phalanx ARGS` in this process, with ``home`` its PHALANX_HOME and no other PHALANX_ setting."""
    home.mkdir(exist_ok=True)
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), **({"PHALANX_TOKEN": token} if token else {}))
    return phalanx_cli(*args, env=env, input=stdin or "")


def phalanx_process(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`phalanx ARGS` as a process of its own: what runs an experiment or a group on this machine."""
    home.mkdir(exist_ok=True)
    return subprocess.run(
        [str(PHALANX), *args], env=clean_env(home), capture_output=True, text=True, timeout=300, input=""
    )


def phalanx_start(home: Path, *args: str) -> subprocess.Popen[str]:
    """`phalanx ARGS` as a process of its own, started: the test goes on meanwhile (``finish``)."""
    home.mkdir(exist_ok=True)
    return subprocess.Popen(
        [str(PHALANX), *args],
        env=clean_env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    """What a process ``phalanx_start`` started ended with, as ``phalanx_process`` returns it."""
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def ok(r: Done | subprocess.CompletedProcess[str]) -> Done | subprocess.CompletedProcess[str]:
    assert r.returncode == 0, f"{r.args}: {r.stdout}{r.stderr}"
    assert "Traceback" not in r.stderr
    return r


def wait_done(home: Path, exp_id: str, *server: str) -> dict[str, Any]:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        doc = json.loads(ok(phalanx(home, "get", exp_id, "-o", "json", *server, token=TOKEN)).stdout)
        if doc["status"] in ("succeeded", "failed", "stopped"):
            return dict(doc)
        time.sleep(0.5)
    raise AssertionError(f"experiment {exp_id} did not end within 240 s")


@pytest.fixture
def server(phalanx_home: Path) -> Any:
    """A server of the test's own: for a test that checks what the whole server lists."""
    s = start_server(phalanx_home, token=TOKEN)
    try:
        yield s
        supervisors_gone(s)
    finally:
        stop_server(s.proc)


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("shared-server-home")
    with running_server(home, token=TOKEN) as s:
        yield s


@pytest.fixture
def shared_server(module_server: Server) -> Iterator[Server]:
    """One server for the tests that check only their own experiments (none lists the whole
    server); each still leaves no supervisor behind."""
    yield module_server
    supervisors_gone(module_server)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    dest = tmp_path / "project"
    shutil.copytree(DATA, dest)
    return dest


def test_login_makes_the_server_the_default_and_local_keeps_this_machine(
    server: Server, project: Path, tmp_path: Path
) -> None:
    laptop = tmp_path / "laptop-home"
    r = ok(phalanx(laptop, "login", server.url, "--token", TOKEN))
    assert TOKEN not in r.stdout + r.stderr and server.url in r.stderr
    assert stat.S_IMODE((laptop / "login.json").stat().st_mode) == 0o600

    r = ok(phalanx(laptop, "run", "-f", str(project / "exp.yml")))
    assert r.stderr.splitlines()[0] == f"phalanx: on server {server.url}"
    on_server = r.stdout.split()[0]
    r = ok(phalanx_process(laptop, "run", "-f", str(project / "exp.yml"), "--local"))
    assert r.stderr.splitlines()[0] == "phalanx: on this machine"
    assert wait_done(laptop, on_server)["status"] == "succeeded"

    r = ok(phalanx(laptop, "ls", "-o", "json"))
    assert [e["id"] for e in json.loads(r.stdout)] == [on_server]
    assert r.stderr == f"phalanx: on server {server.url}\n"
    r = ok(phalanx(laptop, "ls", "-o", "json", "--local"))
    (here,) = [e["id"] for e in json.loads(r.stdout)]
    assert here != on_server and r.stderr == "phalanx: on this machine\n"

    # rerun and resume after the login: on the server (its snapshot; its folder and checkpoint)
    r = ok(phalanx(laptop, "rerun", on_server, "--param", "lr=0.3"))
    assert r.stderr.splitlines()[0] == f"phalanx: on server {server.url}"
    rerun_id = r.stdout.split()[0]
    r = ok(phalanx(laptop, "run", "-f", str(project / "exp.yml"), "--param", "hold=fail-once"))
    failing = r.stdout.split()[0]  # runs beside the rerun
    assert wait_done(laptop, rerun_id)["status"] == "succeeded"
    assert rerun_id not in ok(phalanx(laptop, "ls", "--local")).stdout
    assert wait_done(laptop, failing)["status"] == "failed"
    r = phalanx(laptop, "resume", on_server)  # succeeded: refused as on the server's machine
    assert r.returncode == 2 and "(use `phalanx rerun` to run it again)" in r.stderr, r.stderr
    r = ok(phalanx(laptop, "resume", failing[:8], "-o", "json"))
    assert r.stderr.splitlines()[0] == f"phalanx: on server {server.url}"
    assert json.loads(r.stdout)["id"] == failing
    assert wait_done(laptop, failing)["status"] == "succeeded"  # from its checkpoint, on the server
    attempts = json.loads(ok(phalanx(server.home, "get", failing, "-o", "json")).stdout)["attempts"]
    assert [a["kind"] for a in attempts] == ["start", "resume"] and attempts[1]["checkpoint_step"] == 1
    r = phalanx(laptop, "resume", here, "--local")  # this machine's: a succeeded one is not resumable
    assert r.returncode == 2 and r.stderr.startswith("phalanx: on this machine\n"), r.stderr
    assert "only a failed or stopped one can be resumed" in r.stderr
    r = ok(phalanx(laptop, "delete", rerun_id, "--yes"))
    assert r.stdout == f"deleted {rerun_id}\n" and r.stderr == f"phalanx: on server {server.url}\n"
    assert phalanx(server.home, "get", rerun_id).returncode == 2  # gone from the server's store

    r = ok(phalanx(laptop, "logout"))
    assert not (laptop / "login.json").exists()
    r = ok(phalanx(laptop, "ls", "-o", "json"))
    assert [e["id"] for e in json.loads(r.stdout)] == [here] and r.stderr == ""


def test_a_wrong_token_and_a_server_without_users_are_refused_with_what_to_do(
    shared_server: Server, tmp_path: Path
) -> None:
    server = shared_server
    laptop = tmp_path / "laptop-home"
    r = phalanx(laptop, "login", server.url, "--token", "wrong-token-000000000000")
    assert r.returncode == 2 and "wrong-token" not in r.stderr
    assert "this server refused the token" in r.stderr, r.stderr
    assert f"phalanx login {server.url} --token TOKEN" in r.stderr, r.stderr
    assert not (laptop / "login.json").exists()
    r = phalanx(laptop, "login", server.url, "--user", "ada", stdin="secret\n")
    assert r.returncode == 2 and f"phalanx login {server.url} --token TOKEN" in r.stderr, r.stderr
    assert "secret" not in r.stdout + r.stderr and not (laptop / "login.json").exists()
    # a server without users (its POST /api/v1/tokens knows no 'ada': 401) says how to log in instead
    open_home = tmp_path / "open-server-home"
    open_home.mkdir()
    open_server = start_server(open_home)
    try:
        r = phalanx(laptop, "login", open_server.url, "--user", "ada", stdin="secret\n")
    finally:
        stop_server(open_server.proc)
    assert r.returncode == 2 and f"phalanx login {open_server.url} --token TOKEN" in r.stderr, r.stderr
    assert f"phalanx login {open_server.url} --token TOKEN" in r.stderr and "Traceback" not in r.stderr
    assert not (laptop / "login.json").exists()


@pytest.mark.timeout(600)  # some 30 CLI processes and three experiments: 200 s at load 15 on 2 cores
def test_every_read_and_control_command_prints_on_the_server_what_it_prints_there(
    server: Server, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two experiments run on the server's machine (same store as the server), side by side: the
    # reference output
    started = [
        phalanx_start(server.home, "run", "-f", str(project / "exp.yml"), "-o", "json"),
        phalanx_start(server.home, "run", "-f", str(project / "exp.yml"), "--param", "lr=0.2", "-o", "json"),
    ]
    a, b = (ok(r) for r in [finish(p) for p in started])
    a_id, b_id = json.loads(a.stdout)["id"], json.loads(b.stdout)["id"]
    laptop = tmp_path / "laptop-home"
    remote = ("--server", server.url)

    def same(*args: str) -> str:
        here = ok(phalanx(server.home, *args))
        there = ok(phalanx(laptop, *args, *remote, token=TOKEN))
        assert there.stdout == here.stdout, args
        assert there.stderr.startswith(f"phalanx: on server {server.url}\n")
        return here.stdout

    assert a_id in same("ls") and b_id in same("ls", "--project", "remote-tests")
    same("ls", "-o", "json")
    assert "loss" in same("get", a_id)
    assert json.loads(same("get", a_id, "-o", "json"))["id"] == a_id
    same("get", a_id, "--file")
    assert "loss" in same("metrics", a_id)
    assert same("metrics", a_id, "--title", "loss", "-o", "csv").count("\n") == 4
    same("metrics", a_id, "-o", "json")
    assert "lr" in same("params", a_id)
    same("params", a_id, "-o", "json")
    assert "summary" in same("artifacts", a_id)
    (table,) = json.loads(same("artifacts", a_id, "--kind", "report", "-o", "json"))  # report_table's
    assert table["name"] == "report/table/results/final/2@rank0" and table["metadata"]["title"] == "results"
    assert "bye" in same("logs", a_id)
    same("logs", a_id, "-f", "-o", "json")
    assert "lr" in same("diff", a_id, b_id)
    same("diff", a_id, b_id, "-o", "json")
    assert "done training" in same("reports", a_id)
    assert "latest" in same("checkpoints", a_id)
    (saved,) = json.loads(same("checkpoints", a_id, "-o", "json"))["checkpoints"]
    assert saved["step"] == 2 and saved["metrics"] == {"loss": pytest.approx(0.1 / 3)}
    here_png, there_png = tmp_path / "here.png", tmp_path / "there.png"
    ok(phalanx(server.home, "plot", a_id, "-o", str(here_png)))
    r = ok(phalanx(laptop, "plot", a_id, "-o", str(there_png), *remote, token=TOKEN))
    assert r.stderr == f"phalanx: on server {server.url}\n" and r.stdout == f"{there_png}\n"
    assert there_png.read_bytes() == here_png.read_bytes()  # the server's loss curve, drawn here
    # the query: --where/--column (a rank's own column too) filtered by the server's run table
    query = ("--where", "param:lr > 0.15", "--column", "metric:last:loss@rank0", "--column", "param:lr")
    listed = same("ls", *query)
    assert b_id in listed and a_id not in listed and "0.0666667" in listed  # lr 0.2, last loss 0.2 / 3
    monkeypatch.setenv("PHALANX_TOKEN", TOKEN)
    frame = phalanx_api.search_experiments("param:lr > 0.15", columns=["param:lr"], server=server.url)
    assert list(frame["id"]) == [b_id] and list(frame["param:lr"]) == [0.2]

    for name in ("summary", "outdir"):
        here_dir, there_dir = tmp_path / "here", tmp_path / "there"
        ok(phalanx(server.home, "artifacts", a_id, "--download", name, "-d", str(here_dir)))
        r = ok(
            phalanx(laptop, "artifacts", a_id, "--download", name, "-d", str(there_dir), *remote, token=TOKEN)
        )
        assert r.stdout.strip() == str(there_dir / Path(r.stdout.strip()).name)
        files = sorted(p.relative_to(here_dir) for p in here_dir.rglob("*") if p.is_file())
        assert files and files == sorted(
            p.relative_to(there_dir) for p in there_dir.rglob("*") if p.is_file()
        )
        assert all((here_dir / f).read_bytes() == (there_dir / f).read_bytes() for f in files)

    # control: tags and notes written through the server are what the server's machine reads
    assert (
        ok(phalanx(laptop, "tag", a_id, "best", "baseline", *remote, token=TOKEN)).stdout == "best baseline\n"
    )
    assert ok(phalanx(laptop, "tag", a_id, "--remove", "baseline", *remote, token=TOKEN)).stdout == "best\n"
    assert ok(phalanx(server.home, "tag", a_id)).stdout == "best\n"
    ok(phalanx(laptop, "note", a_id, "first try", *remote, token=TOKEN))
    ok(phalanx(laptop, "note", a_id, "--append", "second", *remote, token=TOKEN))
    assert ok(phalanx(server.home, "note", a_id)).stdout == "first try\nsecond\n"
    # a mistake is said as it is said locally, exit 2, its hint on the door it was given
    here = phalanx(server.home, "get", "zzzz")
    there = phalanx(laptop, "get", "zzzz", *remote, token=TOKEN)
    assert here.returncode == there.returncode == 2
    assert there.stderr.endswith(here.stderr.replace("`phalanx ls`", f"`phalanx ls --server {server.url}`"))

    # stop through the server: its supervisor stops it; stopping it again says so
    held = ok(
        phalanx(laptop, "run", "-f", str(project / "exp.yml"), "--param", "hold=hold", *remote, token=TOKEN)
    )
    held_id = held.stdout.split()[0]
    deadline = time.monotonic() + 120
    while "hello from the script" not in phalanx(laptop, "logs", held_id, *remote, token=TOKEN).stdout:
        assert time.monotonic() < deadline, "the held experiment did not start within 120 s"
        time.sleep(0.5)
    r = phalanx(laptop, "delete", held_id, "--yes", *remote, token=TOKEN)  # running: refused
    assert r.returncode != 0 and "stop it before deleting it (nothing was deleted)" in r.stderr
    r = ok(phalanx(laptop, "stop", held_id, "--timeout", "180", *remote, token=TOKEN))
    assert r.stdout == f"experiment {held_id} stopped\n"
    assert (
        ok(phalanx(laptop, "stop", held_id, *remote, token=TOKEN)).stdout
        == f"experiment {held_id} already stopped\n"
    )
    # delete: the same document on both doors, and the server's machine no longer holds either
    here_doc = json.loads(ok(phalanx(server.home, "delete", a_id, "--yes", "-o", "json")).stdout)
    there = ok(phalanx(laptop, "delete", b_id, held_id[:8], "--yes", "-o", "json", *remote, token=TOKEN))
    assert here_doc == {"deleted": [a_id]} and json.loads(there.stdout) == {"deleted": [b_id, held_id]}
    assert [e["id"] for e in json.loads(ok(phalanx(server.home, "ls", "-o", "json")).stdout)] == []


def test_an_estimator_submitted_with_server_runs_there_and_wait_for_completion_follows_it(
    shared_server: Server, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = shared_server
    import io

    from phalanx.bundles import digest, pack
    from phalanx.estimators import Estimator, Experiment
    from phalanx.runs import RunFailed

    (project / "est.py").write_text(
        "import sys\nfrom phalanx import Task\n"
        "print('hello estimator', sys.argv[1:], flush=True)\n"
        "log = Task.init().get_logger()\n"
        "for i in range(2):\n    log.report_scalar('acc', 'train', value=0.5 + i / 4, iteration=i)\n"
        "sys.exit(0 if sys.argv[2] == 'ok' else 4)\n"
    )
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path / "laptop-home"))  # nothing of the laptop's is read
    exp = Experiment("from-python", "remote-tests", server=server.url, token=TOKEN)
    run = exp.submit(
        Estimator(source_directory=project, entry_script="est.py", script_params={"--mode": "ok"})
    )
    out = io.StringIO()
    details = run.wait_for_completion(show_output=True, output=out)
    assert details["status"] == "succeeded" and details["project"] == "remote-tests"
    assert "hello estimator ['--mode', 'ok']" in out.getvalue()
    assert run.get_metrics("acc") == {"acc": {"train": {"steps": [0, 1], "values": [0.5, 0.75]}}}
    bundle = run.client.get(f"/experiments/{run.id}/submission")["bundle_sha256"]
    assert bundle == digest(pack(project))
    assert not (tmp_path / "laptop-home" / "phalanx.db").exists()  # it ran on the server only

    failing = exp.submit(
        Estimator(source_directory=project, entry_script="est.py", script_params={"--mode": "no"})
    )
    with pytest.raises(RunFailed) as failed:
        failing.wait_for_completion(timeout=240)
    assert failed.value.status == "failed"


GROUP = (
    "version: 1\nkind: group\nname: {name}\nparams: {{hold: 'no'}}\n"
    "hptuning:\n  concurrency: 1\n  grid_search: {{n_experiments: {n}}}\n"
    "  matrix: {{lr: {{values: [{lrs}]}}}}\n"
    "run:\n  cmd: python train.py {{{{ lr }}}} {{{{ hold }}}}\n"
)


@pytest.mark.timeout(600)  # four groups, one of them held and stopped, on loaded cores
def test_group_get_and_stop_on_the_server(shared_server: Server, project: Path, tmp_path: Path) -> None:
    server = shared_server
    laptop = tmp_path / "laptop-home"
    remote = ("--server", server.url)
    (project / "group.yml").write_text(GROUP.format(name="two-lrs", n=2, lrs="0.1, 0.2"))
    # the runs on this machine: only their document's keys are compared, so one trial each; they
    # run (the foreground one in a process of its own) while the server's group is followed
    (project / "one.yml").write_text(GROUP.format(name="one-lr", n=1, lrs="0.1"))
    detached = json.loads(
        ok(phalanx_process(laptop, "run", "-f", str(project / "one.yml"), "-d", "-o", "json")).stdout
    )
    here_run = phalanx_start(laptop, "run", "-f", str(project / "one.yml"), "-o", "json")
    # submitted from the laptop by `group run` (as `run -f FILE --follow` does: test_alerts_server)
    # and followed there: one line per trial state, the group's status last, and with --json the
    # ended group's document, as a run of the file on this machine prints
    done = ok(
        phalanx(laptop, "group", "run", "-f", str(project / "group.yml"), "--json", *remote, token=TOKEN)
    )
    doc = json.loads(done.stdout)
    group_id = doc["id"]
    assert doc["status"] == "succeeded" and [t["state"] for t in doc["trials"]] == ["done", "done"], doc
    said = [ln for ln in done.stderr.splitlines() if ln.startswith("phalanx: trial ")]
    assert [ln.split(" (")[0] for ln in said if ln.endswith(": done")] == [
        "phalanx: trial 0",
        "phalanx: trial 1",
    ]
    assert done.stderr.endswith(f"phalanx: group {group_id} succeeded\n"), done.stderr
    here_doc = json.loads(ok(finish(here_run)).stdout)
    assert set(here_doc) == set(doc) and here_doc["status"] == "succeeded", here_doc
    assert set(detached) == set(doc), detached
    for args in (("group", "get", group_id), ("group", "get", group_id, "-o", "json")):
        here = ok(phalanx(server.home, *args))
        there = ok(phalanx(laptop, *args, *remote, token=TOKEN))
        assert there.stdout == here.stdout and "0.2" in here.stdout, args
    # the list too: byte for byte the server's machine's, whether each controller runs included
    here_json = ok(phalanx(server.home, "group", "ls", "-o", "json")).stdout
    there_json = ok(phalanx(laptop, "group", "ls", "-o", "json", *remote, token=TOKEN))
    assert there_json.stderr == f"phalanx: on server {server.url}\n"
    assert there_json.stdout == here_json and '"controller_running": false' in here_json  # ended
    listed = ok(phalanx(laptop, "group", "ls", *remote, token=TOKEN)).stdout
    assert group_id in listed and "2/2" in listed, listed
    r = ok(phalanx(laptop, "group", "stop", group_id, *remote, token=TOKEN))
    assert r.stdout == f"group {group_id} already succeeded\n"

    # a group whose trial holds: stopped through the server, its running trial with it
    (project / "held.yml").write_text(GROUP.format(name="held", n=2, lrs="0.1, 0.2"))
    # submitted without --follow: -o json prints the group as it is now, the same keys as a detached run here
    started = json.loads(
        ok(
            phalanx(
                laptop, "run", "-f", str(project / "held.yml"), "--param", "hold=hold", "-o", "json", *remote,
                token=TOKEN,
            )
        ).stdout
    )  # fmt: skip
    assert set(started) == set(doc) and started["status"] in ("created", "running"), started
    held_id = started["id"]
    deadline = time.monotonic() + 180
    while True:
        doc = json.loads(
            ok(phalanx(laptop, "group", "get", held_id, "-o", "json", *remote, token=TOKEN)).stdout
        )
        trials = [t for t in doc["trials"] if t["state"] == "running"]
        if (
            trials
            and "hello" in phalanx(laptop, "logs", trials[0]["experiment_id"], *remote, token=TOKEN).stdout
        ):
            break
        assert time.monotonic() < deadline, "the held group's first trial did not start within 180 s"
        time.sleep(0.5)
    r = ok(phalanx(laptop, "group", "stop", held_id, "--timeout", "180", *remote, token=TOKEN))
    assert r.stdout == f"group {held_id} stopped\n"
    assert wait_done(server.home, trials[0]["experiment_id"])["status"] == "stopped"
    # the stopped group deleted from the laptop: its trials' experiments go with it
    r = phalanx(laptop, "group", "delete", held_id[:4], "--yes", *remote, token=TOKEN)
    assert r.returncode == 2 and f"is a 4-character prefix of group {held_id}" in r.stderr, r.stderr
    gone = ok(phalanx(laptop, "group", "delete", held_id, "--yes", "-o", "json", *remote, token=TOKEN)).stdout
    assert json.loads(gone) == {
        "group": held_id,
        "deleted": sorted(t["experiment_id"] for t in doc["trials"]),
    }
    assert not (server.home / "groups" / held_id).exists()  # the server's folder of it goes too
    said = {
        "group": f"no group '{held_id}'; `phalanx group ls --server {server.url}` lists them",
        "get": f"no experiment '{trials[0]['experiment_id']}'",
    }
    for args in (("group", "get", held_id), ("get", trials[0]["experiment_id"])):
        r = phalanx(laptop, *args, *remote, token=TOKEN)
        assert r.returncode == 2 and said[args[0]] in r.stderr, (args, r.stderr)
    # the detached group on this machine ends by itself (nothing of it may outlive the test); the
    # test's timeout bounds the wait
    while json.loads(ok(phalanx(laptop, "group", "get", detached["id"], "-o", "json")).stdout)["status"] != (
        "succeeded"
    ):
        time.sleep(0.5)
