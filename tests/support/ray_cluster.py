"""A real two-node Ray cluster (a head and one more raylet, 1 CPU each) in a loopback-only network
namespace, for the Ray engine's tests.

Why a namespace: Ray 2.60 binds the machine's interface address even when told 127.0.0.1, and the
tests may talk to loopback only. Inside a fresh network namespace whose only interface is ``lo``,
the head's raylet is 127.0.0.1 and the second raylet 127.0.0.2 (all of 127.0.0.0/8 is on ``lo``),
so the two nodes have distinct addresses and Ray places bundles on either.

How the tests reach it: the namespace is held by one process (``unshare -n`` running ``sleep``); every
process that must talk to Ray or to the nodes' replicas runs in it through
``nsenter --net=/proc/HOLDER/ns/net`` (``RayPool.command``): the `ray start`s, the `phalanx server`
the replicas report to, and the `phalanx` commands under test (their supervisor is Ray's driver).
The test process itself stays outside; what it must ask over HTTP it asks from one thread that has
joined the namespace (``RayPool.inside``, setns(2) on that thread only). No port is probed: a new
namespace has every port free, so the fixed ones below are bound by their owners as they start.

Ray starts slowly here (33-46 s per node under load): one cluster per test module, shared.
Teardown: every process in the namespace is ended (SIGTERM, then SIGKILL), then the holder; no
process of an experiment may be among them (each test's own cleanup), and nothing may be left in the
namespace at the end (``RayPool.leftovers``). Not `ray stop`: it ends every Ray of the machine.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

BIN = Path(sys.executable).parent
GCS_PORT = 6379
SERVER_PORT = 8000  # the `phalanx server` the replicas report to, inside the namespace
CLONE_NEWNET = 0x40000000
T = TypeVar("T")

# Not RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: on Linux it makes Ray a one-machine Ray (loopback
# address, and `ray start --address` refuses to add a node); the namespace keeps it on loopback.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}

PROBE = f"""
import json, ray
ray.init(address="127.0.0.1:{GCS_PORT}", namespace="phalanx", logging_level="ERROR", log_to_driver=False)
actors = [a for a in ray._private.state.actors().values() if a["State"] != "DEAD"]
groups = [g for g in ray.util.placement_group_table().values() if g["state"] != "REMOVED"]
print(json.dumps({{"actors": [a.get("Name") or a["ActorID"] for a in actors],
                  "groups": [g["name"] for g in groups],
                  "nodes": sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])}}))
"""


def ray_available() -> bool:
    return shutil.which("unshare") is not None and (BIN / "ray").exists() and os.geteuid() == 0


@dataclass
class RayPool:
    """The running cluster: run commands in its namespace, look at what Ray holds."""

    holder: subprocess.Popen[bytes]
    root: Path  # node homes, Ray's temp folder, logs
    inside_thread: concurrent.futures.ThreadPoolExecutor
    temp: Path | None = None  # Ray's temp folder (short: socket paths), removed at teardown
    # what of an experiment still ran in the namespace when the pool was torn down (must be nothing)
    experiments_left: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{GCS_PORT}"

    @property
    def netns(self) -> str:
        return f"/proc/{self.holder.pid}/ns/net"

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["nsenter", f"--net={self.netns}", *argv]

    def run(
        self, argv: list[str], env: Mapping[str, str], timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(argv), env=dict(env), capture_output=True, text=True, timeout=timeout, check=False
        )

    def popen(self, argv: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(
                self.command(argv),
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def inside(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` run on the one thread of this process that joined the namespace."""
        return self.inside_thread.submit(fn, *args).result()

    def holds(self) -> dict[str, list[str]]:
        """The actors and placement groups Ray holds now (not dead, not removed), and its nodes."""
        r = self.run([sys.executable, "-c", PROBE], ray_env(self.root / "probe"), timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        doc: dict[str, list[str]] = json.loads(r.stdout.strip().splitlines()[-1])
        return doc

    def leftovers(self) -> list[str]:
        """Every process in the namespace but the holder: "pid command"."""
        out = []
        mine = os.readlink(self.netns)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == self.holder.pid:
                continue
            try:
                if os.readlink(f"/proc/{entry.name}/ns/net") != mine:
                    continue
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            out.append(f"{entry.name} {cmd.strip()}")
        return out


def ray_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHALANX_", "RAY_"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(RAY_ENV, HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


def _join(netns: str) -> None:
    """setns(2) for the calling thread only: the thread pool's one worker lives in the namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(netns, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns failed")
    finally:
        os.close(fd)


def node_env(root: Path, node: str) -> dict[str, str]:
    """A node's environment: its own home (so its node folder, ~/.cache/phalanx/ray, is its own, as
    on separate boxes), and pip that installs from the pool's wheelhouse only (the namespace has
    no network; a test puts the wheels an environment needs there first)."""
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    return ray_env(root / node, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels))


class _SlowStart(AssertionError):
    """Ray gave up waiting for its own raylet to register (a fixed 30 s in Ray 2.60) on a machine
    too loaded to answer it in time: worth one more try, from scratch."""


def _start_node(pool: RayPool, argv: list[str], env: dict[str, str]) -> None:
    r = pool.run(argv, env, timeout=300)
    if r.returncode != 0:
        said = r.stdout + r.stderr
        failure = _SlowStart if "timed out during startup" in said else AssertionError
        raise failure(f"{' '.join(argv[:3])} failed: {said}")


def _start_nodes(pool: RayPool, root: Path) -> None:
    """The head, then the second raylet."""
    # Ray's sockets live in its temp folder, and a socket's path may hold 107 bytes at most
    pool.temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    head = [
        str(BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={GCS_PORT}",
        "--num-cpus=1", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
        f"--temp-dir={pool.temp}",
    ]  # fmt: skip
    _start_node(pool, head, node_env(root, "node-1"))
    worker = [
        str(BIN / "ray"), "start", f"--address=127.0.0.1:{GCS_PORT}", "--node-ip-address=127.0.0.2",
        "--num-cpus=1", "--num-gpus=0", "--disable-usage-stats",
    ]  # fmt: skip
    _start_node(pool, worker, node_env(root, "node-2"))


def start_pool(root: Path, tries: int = 2) -> RayPool:
    holder = subprocess.Popen(
        ["unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep infinity"], start_new_session=True
    )
    pool = RayPool(holder, root, concurrent.futures.ThreadPoolExecutor(max_workers=1))
    try:
        deadline = time.monotonic() + 10
        while os.readlink(pool.netns) == os.readlink("/proc/self/ns/net"):
            assert time.monotonic() < deadline, "unshare -n did not make a namespace"
            time.sleep(0.05)
        pool.inside(_join, pool.netns)
        for attempt in range(tries):
            try:
                _start_nodes(pool, root)
                break
            except _SlowStart:
                if attempt == tries - 1:
                    raise
                _end_everything_in(pool)
    except BaseException:
        stop_pool(pool)
        raise
    return pool


def _of_an_experiment(pid: int) -> bool:
    try:
        return any(
            v.startswith(b"PHALANX_EXPERIMENT_ID=")
            for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        )
    except OSError:
        return False


def _end_everything_in(pool: RayPool) -> None:
    """SIGTERM every process in the pool's namespace (Ray's and anything left of a test), SIGKILL
    what is left after 3 s (some of Ray's never end on SIGTERM: a longer wait only costs the suite).
    Only the namespace's: `ray stop` would end every Ray of the machine, another session's too."""
    for line in pool.leftovers():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(line.split()[0]), signal.SIGTERM)
    deadline = time.monotonic() + 3
    while pool.leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    deadline = time.monotonic() + 30
    while pool.leftovers() and time.monotonic() < deadline:
        for line in pool.leftovers():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        time.sleep(0.2)
    if pool.temp is not None:
        shutil.rmtree(pool.temp, ignore_errors=True)


def stop_pool(pool: RayPool) -> list[str]:
    """End every process in the namespace, then its holder; returns what was still running in the
    namespace at the end (nothing, or the teardown failed). ``pool.experiments_left``: what of an
    experiment ran then (a process carrying PHALANX_EXPERIMENT_ID)."""
    pool.experiments_left = [line for line in pool.leftovers() if _of_an_experiment(int(line.split()[0]))]
    _end_everything_in(pool)
    left = pool.leftovers()
    pool.holder.kill()
    pool.holder.wait(timeout=30)
    pool.inside_thread.shutdown(wait=False)
    return left


@pytest.fixture(scope="module")
def ray_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayPool]:
    """One real two-node Ray cluster for the module (Ray's start is slow; share it)."""
    if not ray_available():
        pytest.skip("needs root, unshare and Ray (pip install 'phalanx[ray]')")
    pool = start_pool(tmp_path_factory.mktemp("ray-pool"))
    try:
        yield pool
    finally:
        left = stop_pool(pool)
        assert left == [], f"still running in the pool's namespace after its teardown: {left}"
        assert pool.experiments_left == [], f"outlived their experiments: {pool.experiments_left}"
