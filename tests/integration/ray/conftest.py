"""The two-node Ray cluster these tests run on (one per module: Ray starts slowly), and the
`phalanx server` inside its network namespace that the replicas fetch their code from and report to."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.ray_cluster import BIN, SERVER_PORT, RayPool, ray_env, ray_pool

__all__ = ["PoolServer", "pool_server", "ray_pool"]

TOKEN = "ray-pool-server-token-0123456789"


@dataclass
class PoolServer:
    """A `phalanx server` in the pool's namespace, with the Ray cluster registered in its home."""

    pool: RayPool
    home: Path
    url: str
    token: str

    def env(self, home: Path | None = None, **extra: str) -> dict[str, str]:
        return ray_env(home or self.home, PHALANX_HOME=str(home or self.home), **extra)

    def phalanx(self, *args: str, home: Path | None = None, timeout: float = 400, **extra: str):  # type: ignore[no-untyped-def]
        env = self.env(home, PHALANX_TOKEN=self.token, **extra)
        return self.pool.run([str(BIN / "phalanx"), *args], env, timeout=timeout)


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def pool_server(ray_pool: RayPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolServer]:
    home = tmp_path_factory.mktemp("server-home")
    (home / "server.token").write_text(TOKEN + "\n")
    url = f"http://127.0.0.1:{SERVER_PORT}"
    server = PoolServer(ray_pool, home, url, TOKEN)
    r = server.phalanx(
        "cluster", "add", "pool", "--kind", "ray", "--address", ray_pool.address, "--server-url", url
    )
    assert r.returncode == 0, r.stdout + r.stderr
    argv = [str(BIN / "phalanx"), "server", "--port", str(SERVER_PORT), "--log-level", "warning"]
    argv += ["--token-file", str(home / "server.token")]
    # Ray runs every job as its daemons' account, so a boxing server refuses to send one there
    # (docs/security.md#ray): a team that uses a Ray cluster runs its server trusting its submitters
    argv += ["--trust-submitters"]
    proc = ray_pool.popen(argv, server.env(PHALANX_TOKEN=TOKEN), home / "server.log")
    try:
        deadline = time.monotonic() + 90
        while not ray_pool.inside(_health, url):
            assert proc.poll() is None, (home / "server.log").read_text()
            assert time.monotonic() < deadline, "phalanx server did not answer within 90 s"
            time.sleep(0.3)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except Exception:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
