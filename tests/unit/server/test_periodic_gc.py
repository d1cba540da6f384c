"""The server sweeps what `phalanx gc` sweeps, on its own, every ``gc_hours`` (issue #10 item 5)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fastapi.testclient import TestClient

from phalanx.config import Settings
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store


def _orphan(settings: Settings, name: str, age: float) -> Path:
    """A run folder of an experiment the store does not hold (a deleted one), ``age`` seconds old."""
    folder = settings.runs_dir / name
    folder.mkdir(parents=True)
    (folder / "supervisor.log").write_text("x" * 1000)
    old = time.time() - age
    for path in (folder / "supervisor.log", folder):
        os.utime(path, (old, old))
    return folder


def test_the_server_removes_orphaned_run_folders_on_its_own(phalanx_home: Path) -> None:
    settings = Settings(home=phalanx_home)
    store = open_store(settings)
    kept = store.create_experiment(name="kept", project="p")
    old_orphan = _orphan(settings, "0123456789ab", age=3600)
    fresh_orphan = _orphan(settings, "ba9876543210", age=0)  # a --detach run about to record itself
    (settings.runs_dir / kept.id).mkdir(parents=True, exist_ok=True)
    # a sweep every 0.1 s
    server = ServerSettings(store=settings, allowed_hosts=["testserver"], gc_hours=0.1 / 3600)
    with TestClient(create_app(server, store)) as client:
        sweeper = client.app.state.sweeper  # type: ignore[attr-defined]
        deadline = time.monotonic() + 30
        # a sweep counts once it has finished (it VACUUMs after removing folders): wait for both
        while (old_orphan.exists() or sweeper.sweeps < 1) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.get("/api/v1/health").json()["ok"]
        assert sweeper.sweeps >= 1
    assert not old_orphan.exists()
    assert fresh_orphan.exists() and (settings.runs_dir / kept.id).exists()


def test_gc_hours_zero_turns_the_sweep_off(phalanx_home: Path) -> None:
    settings = Settings(home=phalanx_home)
    server = ServerSettings(store=settings, allowed_hosts=["testserver"], gc_hours=0)
    with TestClient(create_app(server, open_store(settings))) as client:
        assert client.app.state.sweeper is None  # type: ignore[attr-defined]
