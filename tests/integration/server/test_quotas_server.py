"""`phalanx quota --server URL` sets, lists and removes a real server's quotas through its API."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.integration.server.serverproc import PHALANX, Server, clean_env, start_server, stop_server
from tests.support.cli import Done, phalanx_cli

TOKEN = "quota-test-token-0123456789"


@pytest.fixture
def server(phalanx_home: Path) -> Any:
    s = start_server(phalanx_home, token=TOKEN)
    try:
        yield s
    finally:
        stop_server(s.proc)


def quota(server: Server, tmp_path: Path, *args: str, token: str = TOKEN) -> Done:
    """`phalanx quota ARGS --server URL` in this process (tests/support/cli.py). The client's own
    home is elsewhere: what it shows must come from the server."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(tmp_path / "client-home"), PHALANX_TOKEN=token)
    return phalanx_cli("quota", *args, "--server", server.url, env=env)


def test_quotas_are_set_listed_and_removed_on_the_server(server: Server, tmp_path: Path) -> None:
    done = subprocess.run(  # the `phalanx` script itself, once
        [
            str(PHALANX),
            "quota",
            "set",
            "vision",
            "--cores",
            "2",
            "--max-waiting",
            "3",
            "--server",
            server.url,
        ],
        env=clean_env(tmp_path / "client-home", PHALANX_TOKEN=TOKEN),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "at most 2 cores at once; at most 3 waiting" in done.stdout
    # set changes only what is given
    assert quota(server, tmp_path, "set", "vision", "--memory", "4Gi").returncode == 0
    listed = quota(server, tmp_path, "ls", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == f"phalanx: on server {server.url}\n"  # where it acted; stdout stays JSON
    (row,) = json.loads(listed.stdout)
    assert (row["project"], row["cores"], row["memory_mib"], row["max_waiting"]) == ("vision", 2, 4096, 3)
    assert quota(server, tmp_path, "rm", "vision").returncode == 0
    again = quota(server, tmp_path, "rm", "vision")
    assert again.returncode == 2 and "has no quota" in again.stderr and "Traceback" not in again.stderr
    wrong = quota(server, tmp_path, "ls", token="not-the-token")
    assert wrong.returncode == 2 and "refused the token" in wrong.stderr
    assert wrong.stderr.rstrip().endswith("(the refused token came from PHALANX_TOKEN)"), wrong.stderr
    assert not (tmp_path / "client-home" / "phalanx.db").exists()
