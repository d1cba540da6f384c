"""`phalanx server` and `phalanx plot` as a user runs them: the servers and the experiments are real
processes; refusals and a second plot run in this process (tests/support/cli.py)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.server.serverproc import Server, clean_env, start_server, stop_server
from tests.support.cli import Done, phalanx_cli
from tests.unit.server import fill

from phalanx.cli.foreground import ui_hint
from phalanx.cli.server import is_loopback
from phalanx.config import Settings
from phalanx.store import open_store

PHALANX = Path(sys.executable).parent / "phalanx"


def run(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PHALANX), *args], env=clean_env(home, **env), capture_output=True, text=True, timeout=120
    )


def cli(home: Path, *args: str) -> Done:
    """`phalanx ARGS` in this process, with ``home`` its PHALANX_HOME and no other PHALANX_ setting."""
    unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PHALANX_")}
    return phalanx_cli(*args, env={**unset, "PHALANX_HOME": str(home)})


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_server_refuses_a_non_loopback_address_without_a_token(phalanx_home: Path, host: str) -> None:
    r = cli(phalanx_home, "server", "--host", host, "--port", "1")
    assert r.returncode == 2
    assert "without a token" in r.stderr and "PHALANX_TOKEN" in r.stderr
    assert "Traceback" not in r.stderr


def test_an_unreadable_or_empty_token_file_is_a_clear_error(phalanx_home: Path) -> None:
    r = cli(phalanx_home, "server", "--token-file", str(phalanx_home / "missing"))
    assert r.returncode == 2 and "cannot read the token file" in r.stderr
    empty = phalanx_home / "empty"
    empty.write_text("\n")
    r = cli(phalanx_home, "server", "--token-file", str(empty))
    assert r.returncode == 2 and "is empty" in r.stderr


def test_loopback_addresses_are_recognised() -> None:
    assert all(is_loopback(h) for h in ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"])
    assert not any(is_loopback(h) for h in ["0.0.0.0", "::", "10.0.0.1", "example.com"])


TOKEN = "the-server-token-0123456789"


@pytest.fixture(scope="module")
def env_token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server given its token in PHALANX_TOKEN, behind a reverse proxy on 127.0.0.1: its tests
    read, and the one that spends a client address's budget of wrong tokens spends it for
    addresses the proxy names (not the 127.0.0.1 the others ask from)."""
    home = tmp_path_factory.mktemp("env-token-server-home")
    s = start_server(home, env={"PHALANX_TOKEN": TOKEN, "PHALANX_FORWARDED_ALLOW_IPS": "127.0.0.1"})
    try:
        yield s
    finally:
        stop_server(s.proc)


@pytest.mark.parametrize("how", ["token-file", "PHALANX_TOKEN"])
def test_a_token_protects_the_api(phalanx_home: Path, how: str, request: pytest.FixtureRequest) -> None:
    if how == "token-file":
        server = start_server(phalanx_home, token=TOKEN)
    else:
        server = request.getfixturevalue("env_token_server")
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{server.url}/api/v1/experiments", timeout=10)
        assert err.value.code == 401
        req = urllib.request.Request(
            f"{server.url}/api/v1/experiments", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.load(r)["total"] == 0
    finally:
        if how == "token-file":
            stop_server(server.proc)


def _list_status(url: str, token: str, forwarded_for: str) -> int:
    req = urllib.request.Request(
        f"{url}/api/v1/experiments",
        headers={"Authorization": f"Bearer {token}", "X-Forwarded-For": forwarded_for},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_spoofed_x_forwarded_for_gets_no_fresh_throttle_budget(phalanx_home: Path) -> None:
    """By default no X-Forwarded-For is believed (uvicorn's own default believes it from 127.0.0.1):
    a local client that names a new address in each request still spends its one budget."""
    server = start_server(phalanx_home, token=TOKEN)
    try:
        for i in range(5):
            assert _list_status(server.url, "guess", f"10.0.0.{i}") == 401
        assert _list_status(server.url, "another-guess", "10.0.0.99") == 429
        assert _list_status(server.url, TOKEN, "192.0.2.7") == 429
    finally:
        stop_server(server.proc)


def test_behind_a_reverse_proxy_its_clients_are_told_apart_when_asked(env_token_server: Server) -> None:
    """With PHALANX_FORWARDED_ALLOW_IPS naming the proxy (here 127.0.0.1), the address it forwards
    is the client's: one client's wrong guesses do not lock out the others behind the proxy."""
    server = env_token_server
    for _ in range(5):
        assert _list_status(server.url, "guess", "10.0.0.1") == 401
    assert _list_status(server.url, TOKEN, "10.0.0.1") == 429
    assert _list_status(server.url, TOKEN, "10.0.0.2") == 200


def test_run_ends_with_how_to_open_the_experiment_in_the_ui() -> None:
    assert ui_hint("0123456789ab") == (
        "phalanx: see it in the web UI: run `phalanx server` and open http://127.0.0.1:8000/experiments/0123456789ab"
    )
    assert ui_hint("0123456789ab", "http://gpu-box:8000/").endswith(
        "http://gpu-box:8000/experiments/0123456789ab to see it in the web UI"
    )


def test_run_names_the_address_of_the_server_running_over_its_store(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """The hint named port 8000 while the server ran elsewhere."""
    spec = tmp_path / "e.yml"
    spec.write_text("version: 1\nkind: experiment\nrun:\n  cmd: echo ran\n")
    server = start_server(phalanx_home)
    try:
        ran = run(phalanx_home, "run", "-f", str(spec))
        assert ran.returncode == 0, ran.stderr
        exp_id = json.loads(cli(phalanx_home, "ls", "-o", "json").stdout)[0]["id"]
        assert f"phalanx: open {server.url}/experiments/{exp_id} to see it in the web UI" in ran.stderr
    finally:
        stop_server(server.proc)
    after = run(phalanx_home, "run", "-f", str(spec))  # a stopped server's address is not named
    assert "phalanx server` and open http://127.0.0.1:8000/experiments/" in after.stderr


def test_the_servers_home_and_store_are_its_accounts_alone(phalanx_home: Path) -> None:
    """Its store holds every project's records, its home every project's logs and files: made with
    the umask's modes, a home others could enter was readable by every account of the machine."""
    phalanx_home.chmod(0o755)
    server = start_server(phalanx_home)
    try:
        assert stat.S_IMODE(phalanx_home.stat().st_mode) == 0o700
        store = sorted(phalanx_home.glob("phalanx.db*"))
        assert phalanx_home / "phalanx.db" in store
        assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in store if not p.name.endswith(".lock")} == {
            p.name: 0o600 for p in store if not p.name.endswith(".lock")
        }
    finally:
        stop_server(server.proc)


def venv_phalanx(folder: Path) -> Path:
    """A `phalanx` script in ``folder``/.venv/bin, as `make venv` installs it."""
    exe = folder / ".venv" / "bin" / "phalanx"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_the_ui_hint_names_the_venvs_phalanx_when_the_shell_would_not_find_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make run` starts .venv/bin/phalanx, which is not on the user's PATH."""
    exe = venv_phalanx(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [".venv/bin/phalanx", "run"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert "run `.venv/bin/phalanx server`" in ui_hint("0123456789ab")
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    assert "run `phalanx server`" in ui_hint("0123456789ab")


def test_the_ui_hint_survives_a_shell_folder_removed_while_the_run_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = venv_phalanx(tmp_path)
    gone = tmp_path / "work"
    gone.mkdir()
    monkeypatch.chdir(gone)
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    gone.rmdir()  # the job removed the folder the shell ran `phalanx run` in
    monkeypatch.setattr("sys.argv", ["../.venv/bin/phalanx", "run"])
    assert "run `phalanx server`" in ui_hint("0123456789ab")
    monkeypatch.setattr("sys.argv", [str(exe), "run"])
    assert f"run `{exe} server`" in ui_hint("0123456789ab")


def test_plot_writes_one_chart_per_title_as_png(phalanx_home: Path, tmp_path: Path) -> None:
    store = open_store(Settings(home=phalanx_home))
    e = fill.experiment(store)
    for w in range(3):
        fill.scalars(store, e.id, "loss", f"worker {w:02d}", [1.0 / (i + 1 + w) for i in range(200)])
    fill.scalars(store, e.id, "accuracy", "worker 00", [0.5, 0.9])
    store.close()
    out = tmp_path / "loss.png"
    r = run(phalanx_home, "plot", e.id[:6], "--title", "loss", "-o", str(out))
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    everything = tmp_path / "all.svg"
    assert cli(phalanx_home, "plot", e.id, "-o", str(everything), "--x", "time").returncode == 0
    svg = everything.read_text()
    assert "loss" in svg and "accuracy" in svg


def test_plot_mistakes_exit_2_with_a_message(phalanx_home: Path, tmp_path: Path) -> None:
    store = open_store(Settings(home=phalanx_home))
    e = fill.experiment(store)
    fill.scalars(store, e.id, "loss", "a", [1.0])
    store.close()
    cases = [
        (("plot", e.id, "--title", "lsos", "-o", str(tmp_path / "x.png")), "no scalar titled 'lsos'"),
        (("plot", e.id, "-o", str(tmp_path / "x.txt")), "ending in .png"),
        (("plot", "ffffffffffff", "-o", str(tmp_path / "x.png")), "ffffffffffff"),
    ]
    for args, message in cases:
        r = cli(phalanx_home, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.png").exists()
