"""`phalanx tensorboard start` on this machine alone (docs/services.md): TensorBoard of an experiment
of this machine's store on a loopback port, in the foreground, until Ctrl-C, with nothing left
behind; a port in use is exit status 2 saying so; `ls` and `stop` say they are a server's."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.integration.server.serverproc import PHALANX, clean_env, wait_for
from tests.support.cli import phalanx_cli
from tests.unit.server import fill

from phalanx.config import Settings
from phalanx.services.boards import run_name
from phalanx.store import catalog, open_store

pytestmark = pytest.mark.slow


def _start(home: Path, tmp: Path, *args: str) -> subprocess.Popen[str]:
    """`phalanx ARGS` as a process of its own in ``tmp`` (its TMPDIR too), its output in one pipe,
    taking Ctrl-C as from a terminal: a suite started in the background by a script (`make test &`)
    ignores SIGINT, and every process it starts inherits that (the test then waited in vain)."""
    tmp.mkdir(exist_ok=True)
    return subprocess.Popen(
        [str(PHALANX), *args],
        env=clean_env(home, TMPDIR=str(tmp)),
        cwd=tmp,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_takes_ctrl_c,
    )


def _takes_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _said(process: subprocess.Popen[str], pattern: str) -> re.Match[str]:
    """The first match of ``pattern`` in what ``process`` prints (read line by line as it comes)."""
    assert process.stdout is not None
    said = ""
    while not (found := re.search(pattern, said)):
        line = process.stdout.readline()
        assert line, f"it ended before it said {pattern!r}: {said}"
        said += line
    return found


def test_an_experiments_tensorboard_runs_here_until_ctrl_c_and_leaves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = open_store(Settings(home=home))
    e = fill.experiment(store, name="here")
    fill.scalars(store, e.id, "loss", "train", [0.5, 0.25])
    store.close()
    tmp = tmp_path / "tmp"
    board = _start(home, tmp, "tensorboard", "start", e.id[:6], "--port", "0")
    try:
        url = _said(board, r"TensorBoard at (http://127\.0\.0\.1:\d+/)").group(1)
        with urllib.request.urlopen(f"{url}data/runs", timeout=60) as answer:
            assert json.loads(answer.read()) == [run_name(e)]
        query = f"{url}data/plugin/scalars/scalars?run={run_name(e)}&tag=loss/train"
        with urllib.request.urlopen(query, timeout=60) as answer:
            assert [p[1:] for p in json.loads(answer.read())] == [[0, 0.5], [1, 0.25]]
        board.send_signal(signal.SIGINT)  # Ctrl-C
        assert board.wait(timeout=120) == 0
    finally:
        if board.poll() is None:
            board.kill()
            board.wait()
    assert not list(tmp.iterdir())  # its rendered board is gone with it


def test_a_port_in_use_is_exit_2_saying_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = open_store(Settings(home=home))
    e = fill.experiment(store, name="here")
    store.close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        board = _start(
            home, tmp_path / "tmp", "tensorboard", "start", e.id, "--port", str(taken.getsockname()[1])
        )
        err, _ = board.communicate(timeout=300)
    assert board.returncode == 2, err
    assert "cannot listen" in err and "Traceback" not in err


def test_ls_and_stop_are_a_servers_and_mistakes_are_said(tmp_path: Path) -> None:
    env = {"PHALANX_HOME": str(tmp_path / "home")}
    for args in (("tensorboard", "ls"), ("tensorboard", "stop", "abc")):
        done = phalanx_cli(*args, env=env)
        assert done.returncode == 2 and "`phalanx login URL` first" in done.stderr
    done = phalanx_cli("tensorboard", "start", "--group", "g1", "--project", "p", env=env)
    assert done.returncode == 2 and "name one target" in done.stderr
    done = phalanx_cli("tensorboard", "start", "--project", "nothing-here", env=env)
    assert done.returncode != 0 and "has no experiment here" in done.stderr
    for args in (("notebook", "ls"), ("notebook", "stop", "abc")):
        done = phalanx_cli(*args, env=env)
        assert done.returncode == 2 and "`phalanx login URL` first" in done.stderr
    done = phalanx_cli("notebook", "start", "--input", "digits", env=env)
    assert done.returncode == 2 and "give NAME=DATASET[@VERSION]" in done.stderr
    done = phalanx_cli("notebook", "start", "--input", "digits=nothing@latest", env=env)
    assert done.returncode == 2 and "nothing" in done.stderr and "Traceback" not in done.stderr


def _status(url: str) -> int | None:
    """The HTTP status of a GET there; None while nothing listens; 0 when a server that is going
    away took the connection and reset it (neither listening nor gone yet: wait on)."""
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code
    except urllib.error.URLError:
        return None
    except ConnectionError:  # reset mid-answer, or http.client.RemoteDisconnected
        return 0


def test_a_notebook_here_runs_in_this_folder_with_its_input_until_ctrl_c(tmp_path: Path) -> None:
    """JupyterLab on a loopback port, its own token kept (other users of this machine reach the
    port too), the input's folder in its environment; SIGTERM (as Ctrl-C) ends it."""
    home = tmp_path / "home"
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "part-0.csv").write_text("7,1\n")
    store = open_store(Settings(home=home))
    catalog.add_dataset(store, "digits", str(rows), keep_in=home / "kept")
    store.close()
    notebook = _start(home, tmp_path, "notebook", "start", "--input", "digits=digits@latest", "--port", "0")
    try:
        found = _said(notebook, r"(http://127\.0\.0\.1:\d+/)lab\?token=(\w+)")
        url, token = found.groups()
        # JupyterLab says its address a moment before it listens there
        assert wait_for("JupyterLab listens", lambda: _status(f"{url}api/kernels"), 120) == 403  # token kept
        request = urllib.request.Request(f"{url}api/kernelspecs", headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert "python3" in json.loads(answer.read())["kernelspecs"]
        notebook.send_signal(signal.SIGTERM)  # JupyterLab ends with the command, its port freed
        assert notebook.wait(timeout=120) == 0
        assert _status(f"{url}api/kernels") is None  # nothing listens there any more
    finally:
        if notebook.poll() is None:
            notebook.kill()
            notebook.wait()


def test_a_notebook_file_here_runs_its_kernels_in_its_build_on_the_cores_it_holds(tmp_path: Path) -> None:
    """`phalanx notebook start -f` on this machine: its kernel is the file's build (a package of this
    machine's own index), its core and memory are held in the ledger while it runs (`phalanx queue`
    shows it) and given back when it ends; killed, it takes JupyterLab with it."""
    home = tmp_path / "home"
    (tmp_path / "notebook.yml").write_text(
        "version: 1\nkind: notebook\nbuild:\n  pip_packages: [mergedeep==1.3.4]\n"
        '  env_vars: {PIP_INDEX_URL: "file:///opt/pypi/simple", PIP_EXTRA_INDEX_URL: "file:///opt/pypi/simple"}\n'
        "environment:\n  resources: {cpu: {limits: 1}, memory: {limits: 256Mi}}\n"
    )
    for ending in (signal.SIGTERM, signal.SIGKILL):
        notebook = _start(home, tmp_path, "notebook", "start", "-f", "notebook.yml", "--port", "0")
        try:
            held = _said(notebook, r"the notebook holds cores (\d+), 256Mi")
            url, token = _said(notebook, r"(http://127\.0\.0\.1:\d+/)lab\?token=(\w+)").groups()
            wait_for("JupyterLab listens", lambda: _status(f"{url}api/kernels"), 120)  # noqa: B023
            request = urllib.request.Request(
                f"{url}api/kernelspecs", headers={"Authorization": f"token {token}"}
            )
            with urllib.request.urlopen(request, timeout=60) as answer:
                specs = json.loads(answer.read())["kernelspecs"]
            assert list(specs) == ["python3"]  # the build's kernel only, named as notebooks ask
            python = Path(specs["python3"]["spec"]["argv"][0])
            assert python.parent.parent.parent == home / "venvs"
            assert phalanx_cli("queue", env=clean_env(home)).stdout.count("notebook-") == 1
            assert f"cores {held.group(1)}" in phalanx_cli("queue", env=clean_env(home)).stdout
            notebook.send_signal(ending)
            notebook.wait(timeout=120)
            # given back, and nothing listens any more (a killed command takes JupyterLab with it)
            wait_for("JupyterLab ended", lambda: _status(f"{url}api/kernels") is None, 60)  # noqa: B023
            assert "nothing holds resources" in phalanx_cli("queue", env=clean_env(home)).stdout
        finally:
            if notebook.poll() is None:
                notebook.kill()
                notebook.wait()
