"""`phalanx login`/`logout` and the choice of store: the token is kept 0600 and never shown, is sent
only to the server it was stored for, and a command says where it works once a server is in play."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from phalanx import logins
from phalanx.cli.main import main
from phalanx.errors import UsageError
from phalanx.logins import choose

SECRET = "s3cret-token-value-0123456789"


def phalanx(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    out, err = capfd.readouterr()
    return int(ended.value.code or 0), out, err


def test_the_login_file_is_owner_only_whatever_the_umask_and_hides_the_token(phalanx_home: Path) -> None:
    old = os.umask(0)
    try:
        file = logins.save(phalanx_home, logins.Login("http://gpu-box:8000", SECRET))
    finally:
        os.umask(old)
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    stored = logins.load(phalanx_home)
    assert stored == logins.Login("http://gpu-box:8000", SECRET) and SECRET not in repr(stored)
    assert logins.clear(phalanx_home) and not logins.clear(phalanx_home)
    assert logins.load(phalanx_home) is None


def test_the_stored_token_goes_only_to_its_own_server(
    phalanx_home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert choose(None, False) is None and capfd.readouterr().err == ""  # no login: local, silent
    logins.save(phalanx_home, logins.Login("http://gpu-box:8000", SECRET))
    client = choose(None, False)
    assert client is not None and client.url == "http://gpu-box:8000" and client.token == SECRET
    assert capfd.readouterr().err == "phalanx: on server http://gpu-box:8000\n"
    other = choose("http://elsewhere:8000/", False)
    assert other is not None and other.url == "http://elsewhere:8000" and other.token is None
    assert choose(None, True) is None
    assert capfd.readouterr().err.endswith("phalanx: on this machine\n")
    with pytest.raises(UsageError, match="--server and --local"):
        choose("http://gpu-box:8000", True)


def test_login_mistakes_are_exit_2_and_store_nothing(
    phalanx_home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, _, err = phalanx(capfd, "login", "gpu-box:8000", "--token", SECRET)
    assert code == 2 and "http://gpu-box:8000" in err and SECRET not in err
    code, _, err = phalanx(capfd, "login", "http://gpu-box:8000", "--token", SECRET, "--user", "ada")
    assert code == 2 and "--token and --user" in err and SECRET not in err
    code, _, err = phalanx(capfd, "login", "http://gpu-box:8000", "--token", " ")
    assert code == 2 and "empty" in err
    assert not logins.path(phalanx_home).exists()
    code, _, err = phalanx(capfd, "logout")
    assert code == 0 and "not logged in" in err


def test_a_damaged_login_file_is_named_with_the_fix(
    phalanx_home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    logins.path(phalanx_home).write_text("{not json")
    code, _, err = phalanx(capfd, "ls")
    assert code == 2 and str(logins.path(phalanx_home)) in err and "phalanx logout" in err
    code, _, _ = phalanx(capfd, "logout")
    assert code == 0 and not logins.path(phalanx_home).exists()
