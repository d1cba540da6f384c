"""What runs inside a replica's Ray actor, on the node Ray placed its bundle on.

Standard library only: the Ray engine sends this class to the nodes by value (cloudpickle's
``register_pickle_by_value``), so a node needs Ray and Python, not Phalanx. The actor

1. fetches the experiment's code bundle from the Phalanx server (as a pod's fetch-code step does,
   with the experiment's replica token) into the node's cache, once per content hash, checks its
   sha256 and unpacks it into the replica's own folder (``<node dir>/runs/<group>/<replica>/code``);
2. builds the file's ``pip_packages`` (and requirements file, build steps) once per node, as a venv
   of the node's Python in ``<node dir>/envs/<hash>`` under a file lock, reused by every later
   replica and experiment (as the local engine's venvs: only the file's packages, not the worker's);
3. starts the local engine's reaper (``phalanx.backends.local.reaper``, shipped in the bundle's SDK
   copy) with the replica's processes: a process group that stops its siblings when one fails,
   writes the console to ``console.log`` (stderr lines marked) and a status file at the end.

The reaper is started by a thread that waits for it for as long as it runs, so its parent-death
signal (PR_SET_PDEATHSIG, armed by the reaper) fires exactly when the actor's process dies: an
actor killed by Ray (``ray.kill``, its owner's end, its node's loss) takes its replica's process
tree with it. Every method answers at once; the engine polls ``report`` and ``read``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REAPER_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from phalanx.backends.local.reaper import main; sys.exit(main(sys.argv[1:]))"
)
DEFAULT_NODE_DIR = "~/.cache/phalanx/ray"
READ_LIMIT = 1 << 20  # bytes of console one ``read`` returns
ADDR = re.compile(r"@@ADDR(\d+)@@")  # bundle i's node address in the wiring (ray_render)


def node_dir(order: dict[str, Any]) -> Path:
    return Path(os.path.expanduser(order.get("node_dir") or DEFAULT_NODE_DIR))


def fetch_bundle(url: str, sha256: str, cache: Path, token: str | None) -> Path:
    """The bundle in this node's cache (downloaded once per content hash, under a file lock)."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{sha256}.tar.gz"
    with open(cache / f"{sha256}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return path
        headers = {"Authorization": "Bearer " + token} if token else {}
        data = b""
        for attempt in range(6):  # a server that is busy or restarting is waited for, 1+2+4+8+16 s
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as r:
                    data = r.read()
                break
            except OSError as exc:
                code = getattr(exc, "code", 0) or 0
                if (400 <= code < 500 and code not in (408, 429)) or attempt == 5:
                    raise OSError(f"could not fetch its code from {url}: {exc}") from exc
                time.sleep(2**attempt)
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise OSError(f"the code bundle from {url} has sha256 {got}, not {sha256}")
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def unpack(bundle: Path, dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(bundle.read_bytes())) as tar:
        kw: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(dest, **kw)


def _last_line(log: Path) -> str:
    """The last non-blank line a build step wrote (of the log's last 4 KiB), but Phalanx's own."""
    with open(log, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
        lines = f.read().decode(errors="replace").splitlines()
    return next((x.strip() for x in reversed(lines) if x.strip() and not x.startswith("phalanx: ")), "")


class ReplicaActor:
    """One replica on its node. ``order``: experiment_id, group, replica, code_url, code_sha256,
    token, env_build, node_dir, processes ([{argv, env}]), memory_mib, grace."""

    def __init__(self, order: dict[str, Any]) -> None:
        self.order = order
        self.folder: Path = node_dir(order) / "runs" / str(order["group"]) / str(order["replica"])
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log = self.folder / "console.log"
        self.log.touch()
        self.phase = "placed"  # -> preparing -> running -> ended
        self.outcome: dict[str, Any] = {}
        self.pid: int | None = None
        self.started_at: float | None = None
        self._stop = threading.Event()
        self._child: subprocess.Popen[bytes] | None = None  # the env build, then the reaper
        self._thread: threading.Thread | None = None

    # -- what the engine calls --------------------------------------------------------------------
    def start(self, addresses: list[str]) -> dict[str, Any]:
        """Prepare and start the replica in a thread of this actor (see the module docstring)."""
        if self._thread is None and not self._stop.is_set():  # a stop that came first wins
            self.phase = "preparing"
            self._thread = threading.Thread(target=self._keep, args=(addresses,), daemon=True)
            self._thread.start()
        return self.report()

    def report(self) -> dict[str, Any]:
        return {"phase": self.phase, "pid": self.pid, "started_at": self.started_at, **self.outcome}

    def read(self, offset: int) -> bytes:
        """Up to READ_LIMIT bytes of the console from ``offset`` (b"" when there is nothing new)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(offset)
                return f.read(READ_LIMIT)
        except OSError:
            return b""

    def stop(self, grace: float) -> dict[str, Any]:
        """SIGTERM the reaper (it stops the replica's tree, SIGKILL after its grace) or the build,
        and wait until the replica has ended (``grace`` + 10 s at most)."""
        self._stop.set()
        child = self._child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace + 10
        while self._thread is not None and self.phase != "ended" and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._thread is None:
            self.phase, self.outcome = "ended", {"stopped": True, "reason": "stopped before it started"}
        return self.report()

    def cleanup(self) -> None:
        """Remove the replica's folder on this node (code copy, console); the caches stay."""
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- the replica's keeper thread ------------------------------------------------------------
    def _note(self, text: str) -> None:
        with open(self.log, "ab") as f:
            f.write(f"phalanx: {text}\n".encode())

    def _keep(self, addresses: list[str]) -> None:
        try:
            code = self._code()
            paths = self._environment(code)
            if not self._stop.is_set():
                self._run(code, paths, addresses)
                return
            self.outcome = {"stopped": True, "reason": "stopped before it started"}
        except Exception as exc:  # the replica could not start: the engine reports why
            self._note(str(exc))
            self.outcome = {"exit_code": 2, "reason": f"could not start on its node: {exc}"}
            if self._stop.is_set():  # its build was stopped: not a failure of its own
                self.outcome = {"stopped": True, "reason": "stopped before it started"}
        finally:
            self.phase = "ended"

    def _code(self) -> Path:
        o = self.order
        bundle = fetch_bundle(o["code_url"], o["code_sha256"], node_dir(o) / "bundles", o.get("token"))
        code = self.folder / "code"
        unpack(bundle, code)
        return code

    def _environment(self, code: Path) -> tuple[list[str], list[str]]:
        """(PYTHONPATH, PATH) heads: the SDK copy, and the node's venv for this environment, if any."""
        build = self.order.get("env_build")
        if not build:
            return [str(code / ".phalanx-sdk")], [os.path.dirname(sys.executable)]
        env_dir = node_dir(self.order) / "envs" / build["hash"]
        env_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out, open(f"{env_dir}.lock", "a") as lock:
            try:  # the first replica on this node builds; the rest reuse
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._note(f"waiting for this node's build of the environment {build['hash']}")
                fcntl.flock(lock, fcntl.LOCK_EX)
            if not (env_dir / ".ready").exists():
                self._note(f"building the environment {build['hash']} on this node (once)")
                self._build(env_dir, build, code, out)
        return [str(code / ".phalanx-sdk")], [str(env_dir / "bin")]

    def _build(self, env_dir: Path, build: dict[str, Any], code: Path, out: Any) -> None:
        """A venv of this node's Python with the file's packages, then its build steps (run with the
        venv first on PATH). Built where it stays (its scripts name their interpreter by path); the
        ``.ready`` mark says it is complete, so a build cut short is started again from scratch."""
        tmp = env_dir
        shutil.rmtree(tmp, ignore_errors=True)
        steps = [("creating the venv", [sys.executable, "-m", "venv", str(tmp)])]
        if build["packages"]:
            pip = [str(tmp / "bin" / "python"), "-m", "pip", "install", "--no-input", *build["packages"]]
            steps.append(("pip install of build.pip_packages", pip))
        steps += [(f"build step {step!r}", ["/bin/sh", "-c", step]) for step in build["steps"]]
        path = f"{tmp / 'bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
        started = time.monotonic()
        for what, argv in steps:
            env = {**os.environ, "PATH": path, "VIRTUAL_ENV": str(tmp)}
            self._child = subprocess.Popen(
                argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=str(code), env=env,
                start_new_session=True,
            )  # fmt: skip
            if self._wait_saying(self._child, what, started) != 0 or self._stop.is_set():
                raise OSError(f"building its environment failed: {argv[-1]} exited {self._child.returncode}")
        (env_dir / ".ready").touch()

    def _wait_saying(self, child: subprocess.Popen[bytes], what: str, started: float) -> int:
        """The step's exit status; while it writes nothing, a ``still building`` line in the console
        at least every ``heartbeat`` seconds (the order's), with the step and its last line."""
        every = float(self.order.get("heartbeat") or 30.0)
        size, quiet_since = self.log.stat().st_size, time.monotonic()
        while True:
            try:
                return child.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            now, grown = time.monotonic(), self.log.stat().st_size
            if grown != size:
                size, quiet_since = grown, now
            elif now - quiet_since >= every:
                last = _last_line(self.log)
                self._note(
                    f"still building ({now - started:.0f} s): {what}"
                    + (f"; last line: {last}" if last else "")
                )
                size, quiet_since = self.log.stat().st_size, now

    def _run(self, code: Path, paths: tuple[list[str], list[str]], addresses: list[str]) -> None:
        pythonpath, path = paths
        inherited = os.environ.get("PYTHONPATH")
        base = {
            "PYTHONPATH": os.pathsep.join([*pythonpath, *([inherited] if inherited else [])]),
            "PATH": os.pathsep.join([*path, os.environ.get("PATH", os.defpath)]),
        }
        processes = [
            {"argv": p["argv"], "cwd": str(code), "env": {**fill(p["env"], addresses), **base}}
            for p in self.order["processes"]
        ]
        config = {
            "name": self.order["replica"],
            "processes": processes,
            "log": str(self.log),
            "status": str(self.folder / "status.json"),
            "parent": os.getpid(),
            "grace": self.order.get("grace", 5.0),
            "memory_mib": self.order.get("memory_mib"),
        }
        cfg = self.folder / "reaper.json"
        fd = os.open(cfg, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds the replica token
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        with open(self.log, "ab") as errors:
            self._child = subprocess.Popen(
                [sys.executable, "-I", "-c", REAPER_BOOT, str(code / ".phalanx-sdk"), str(cfg)],
                env={**os.environ, **processes[0]["env"]},
                cwd=str(code),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                start_new_session=True,  # the replica's process group, led by the reaper
            )
        self.pid, self.started_at, self.phase = self._child.pid, time.time(), "running"
        if self._stop.is_set():
            os.killpg(self._child.pid, signal.SIGTERM)
        code_or_signal = self._child.wait()
        try:
            status = json.loads((self.folder / "status.json").read_text())
        except (OSError, ValueError):
            status = {"exit_code": code_or_signal if code_or_signal >= 0 else None}
            if code_or_signal < 0:
                status["signal"] = -code_or_signal
        if self._stop.is_set() and status.get("exit_code") != 0:
            status["stopped"] = True
        self.outcome = status


def fill(env: dict[str, str], addresses: list[str]) -> dict[str, str]:
    """The wiring with each ``@@ADDRi@@`` replaced by bundle i's node address."""
    return {k: ADDR.sub(lambda m: addresses[int(m.group(1))], v) for k, v in env.items()}
