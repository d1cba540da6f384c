"""`phalanx resume` after `phalanx login` (or with --server): the server has no resume yet, so it is
refused with exit status 2 and what to do instead, never done on this machine's store in its place;
--local keeps this machine and says so. No server is reached: the refusal comes before any call."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx import logins
from phalanx.cli.main import main

URL = "http://gpu-box:8000"


def _ended(args: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[object, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(args)
    out, err = capfd.readouterr()
    return ended.value.code, out, err


def test_resume_refuses_a_server_and_local_keeps_this_machine(
    phalanx_home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _ended(["resume", "3f2a9c0d41be", "--server", URL], capfd)
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"`phalanx resume` does not act on a server yet (the server at {URL} has no API" in err
    assert "`phalanx rerun 3f2a9c0d41be`" in err and "--local" in err

    logins.save(phalanx_home, logins.Login(URL, None))
    code, out, err = _ended(["resume", "3f2a9c0d41be", "-o", "json"], capfd)  # the login's server
    assert code == 2 and out == "" and "does not act on a server yet" in err

    code, out, err = _ended(["resume", "3f2a9c0d41be", "--local"], capfd)  # this machine's store
    assert code == 2 and err.startswith("phalanx: on this machine\n") and "no experiment" in err


def test_rerun_takes_one_door(phalanx_home: Path, capfd: pytest.CaptureFixture[str]) -> None:
    code, _, err = _ended(["rerun", "3f2a9c0d41be", "--server", URL, "--local"], capfd)
    assert code == 2 and "--server and --local: give one" in err
