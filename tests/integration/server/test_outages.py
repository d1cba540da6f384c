"""Outages are answered, not crashed: with its PostgreSQL stopped for seconds, or its disk full, a
real `phalanx server` answers 503 with Retry-After (never a 500 or a traceback), the clients retry
with their Idempotency-Keys, and once the outage ends every answered submit runs, once: 0 lost,
0 doubled, nothing half-written."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import _processes_under
from tests.integration.server.serverproc import Server, start_server, stop_server, wait_for
from tests.support import postgres
from tests.support.small_disk import fill, tmpfs

from phalanx.apiclient import Client, multipart
from phalanx.bundles import pack

TOKEN = "outage-token-0123456789"
TRIVIAL = 'version: 1\nkind: experiment\nname: trivial\nproject: plane\nrun:\n  cmd: python -c "print(1)"\n'


def api(server: Server, path: str) -> Any:
    req = urllib.request.Request(f"{server.url}/api/v1{path}")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def all_ended(server: Server, ids: list[str]) -> bool:
    items = {e["id"]: e for e in api(server, "/experiments?limit=500")["items"]}
    return all(items.get(i, {}).get("status") in ("succeeded", "failed", "stopped") for i in ids)


def submit_all(server: Server, project: Path, keys: list[str], answers: dict[str, str]) -> None:
    client = Client(server.url, TOKEN)
    for key in keys:
        answers[key] = str(client.submit(project / "exp.yml", pack(project), {}, 0, key=key)["id"])


def server_log(server: Server, logs: Path | None = None) -> str:
    return "\n".join(p.read_text(errors="replace") for p in (logs or server.home).glob("server-*.log"))


def check_ran_once(server: Server, answers: dict[str, str]) -> None:
    wait_for("every answered submit ended", lambda: all_ended(server, list(answers.values())))
    items = api(server, "/experiments?limit=500")["items"]
    assert sorted(e["id"] for e in items) == sorted(answers.values()), "lost or doubled submits"
    ended = [(e["id"], e["status"], e.get("reason")) for e in items]
    assert {e["status"] for e in items} == {"succeeded"}, ended
    wait_for(
        "every supervisor exited",
        lambda: not [p for p, _ in _processes_under(server.home) if p != server.proc.pid],
        120,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "exp.yml").write_text(TRIVIAL)
    return folder


@pytest.mark.postgres
def test_postgresql_stopped_for_seconds_loses_and_doubles_nothing(phalanx_home: Path, project: Path) -> None:
    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(reason)
    pg = postgres.start_postgres()  # its own: stopped mid-test
    try:
        server = start_server(phalanx_home, token=TOKEN, env={"PHALANX_DB_URL": pg.create_database()})
        try:
            answers: dict[str, str] = {}
            keys = [f"pg-{i}" for i in range(6)]
            first = threading.Thread(target=submit_all, args=(server, project, keys[:3], answers))
            first.start()
            time.sleep(0.5)
            postgres.pause(pg)
            during = threading.Thread(target=submit_all, args=(server, project, keys[3:], answers))
            during.start()
            time.sleep(4)
            postgres.resume(pg)
            first.join(timeout=180)
            during.join(timeout=180)
            assert sorted(answers) == keys, "a client gave up"
            check_ran_once(server, answers)
            log = server_log(server)
            assert "Traceback" not in log and " 500" not in log, log[-3000:]
        finally:
            stop_server(server.proc)
    finally:
        pg.stop()


@pytest.fixture
def small_home(tmp_path: Path) -> Iterator[Path]:
    """The server's home on a 64 MiB tmpfs (root only; skipped elsewhere), so its disk can fill."""
    with tmpfs(tmp_path / "disk", 64) as disk:
        yield disk


def test_a_full_disk_is_a_503_and_the_retried_submit_runs_once(
    small_home: Path, project: Path, tmp_path: Path
) -> None:
    server = start_server(small_home, token=TOKEN, log_dir=tmp_path)  # its log off the disk that fills
    try:
        filler = fill(small_home)
        text = (project / "exp.yml").read_text()
        body, kind = multipart(
            {"file_name": "exp.yml", "file_text": text}, "bundle", "b.tar.gz", pack(project)
        )
        req = urllib.request.Request(f"{server.url}/api/v1/experiments", data=body, method="POST")
        for name, value in (
            ("Content-Type", kind),
            ("Authorization", f"Bearer {TOKEN}"),
            ("Idempotency-Key", "disk-1"),
        ):
            req.add_header(name, value)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=60)
        assert refused.value.code == 503, refused.value.read()
        assert refused.value.headers["Retry-After"] == "5"
        answer = json.loads(refused.value.read())
        assert answer["error"] == "unavailable" and "disk" in answer["message"], answer
        for left in ("orders", "bundles"):  # nothing half-written
            folder = small_home / "server" / left
            assert not folder.exists() or not any(folder.iterdir()), left
        filler.unlink()  # the outage ends; the client's retry goes through, once
        answers: dict[str, str] = {}
        submit_all(server, project, ["disk-1"], answers)
        check_ran_once(server, answers)
        log = server_log(server, tmp_path)
        assert "Traceback" not in log, log[-3000:]
        assert log.count("answered 503") == 1  # one line per outage, however many requests failed
    finally:
        stop_server(server.proc)
