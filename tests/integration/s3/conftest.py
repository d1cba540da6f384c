"""A real S3 API (moto's server, tests.support.s3) for the object-storage tests: one server per test
process, a fresh bucket per test, and a Phalanx CLI whose PHALANX_ARTIFACTS_URL points into it."""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.local.conftest import Phalanx, experiment_pids, kill_started
from tests.support import s3

_SHARED: list[s3.S3Server] = []


def shared_server() -> s3.S3Server:
    if not _SHARED:
        server = s3.start()
        atexit.register(server.stop)
        _SHARED.append(server)
    return _SHARED[0]


@pytest.fixture
def s3_server() -> s3.S3Server:
    reason = s3.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return shared_server()


@pytest.fixture
def s3_url(s3_server: s3.S3Server, phalanx_home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://<fresh bucket>/phalanx``, with this process's AWS variables pointing at the server."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return f"s3://{s3_server.create_bucket()}/phalanx"


@pytest.fixture
def phalanx_s3(s3_url: str, phalanx_home: Path, tmp_path: Path) -> Iterator[Phalanx]:
    """The CLI helper of the local-engine tests, storing files in the test's bucket."""
    import os
    import signal

    cli = Phalanx(phalanx_home, tmp_path)
    cli.env["PHALANX_ARTIFACTS_URL"] = s3_url
    yield cli
    kill_started(cli)
    for pid in experiment_pids(phalanx_home):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
