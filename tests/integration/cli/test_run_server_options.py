"""`phalanx run --server`: mistakes are said before anything is packed or sent (exit 2, no traceback),
and a server that cannot be reached is a clear failure of its own (exit 69, not 1: "it failed")."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from phalanx.cli.main import main
from phalanx.errors import UNAVAILABLE_EXIT

SPEC = "version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n"


def phalanx(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    return int(ended.value.code or 0), capfd.readouterr().err


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yml"
    path.write_text(SPEC)
    return path


def test_local_only_options_and_a_missing_server_are_refused(
    capfd: pytest.CaptureFixture[str], spec: Path, phalanx_home: Path
) -> None:
    code, err = phalanx(capfd, "run", "-f", str(spec), "--follow")
    assert code == 2 and "--server URL" in err
    code, err = phalanx(capfd, "run", "-f", str(spec), "--server", "http://127.0.0.1:9", "--dry-run")
    assert code == 2 and "--dry-run: not available on a server" in err
    code, err = phalanx(capfd, "run", "-f", str(spec), "--server", "http://127.0.0.1:9", "-d", "--follow")
    assert code == 2 and "--detach and --follow: give one" in err
    code, err = phalanx(capfd, "run", "-f", str(spec), "--server", "gpu-box:8000")
    assert code == 2 and "http://gpu-box:8000" in err
    empty = spec.with_name("token")
    empty.write_text("\n")
    code, err = phalanx(
        capfd, "run", "-f", str(spec), "--server", "http://127.0.0.1:9", "--token-file", str(empty)
    )
    assert code == 2 and "the file is empty" in err
    assert "Traceback" not in err


def test_a_server_that_cannot_be_reached_is_exit_69_naming_it(
    capfd: pytest.CaptureFixture[str], spec: Path, phalanx_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("phalanx.apiclient.SUBMIT_RETRY_SECONDS", 1.0)  # (2 minutes by default)
    with socket.socket() as bound:  # bound, never listening: connections to it are refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        code, err = phalanx(capfd, "run", "-f", str(spec), "--server", url)
    assert code == UNAVAILABLE_EXIT and f"cannot reach the server at {url} (Connection refused)" in err
    assert err.endswith("cannot start it twice; `--local` works on this machine\n"), err
    # said once that it retries, then that it gave up, and that the same key cannot start it twice
    assert err.count("retrying for up to 1 s with the same Idempotency-Key") == 1
    assert "gave up after retrying for 1 s" in err and "cannot start it twice" in err
    assert "Traceback" not in err
