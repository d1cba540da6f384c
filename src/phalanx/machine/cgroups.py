"""A control group per boxed replica: its memory, CPU and process-count limits, and the one
answer to "which processes are this replica's" (a process cannot leave its cgroup, whatever it
does to its environment or its session).

Made below this process's own cgroup in each hierarchy (so limits set above still hold), named
``phalanx/<experiment>.<attempt>.<unit>``. cgroup v1 (the memory, cpu, pids and freezer
hierarchies, one folder each) where they are mounted and writable; else cgroup v2 (one folder,
with the controllers its parent delegates); else none, and the reaper's watchdog keeps the memory
limit as before. ``describe()`` says which, for `phalanx server`'s start line. Standard library
only: the reaper imports it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from phalanx.machine.record import Record

ROOT = Path("/sys/fs/cgroup")
V1 = ("memory", "cpu", "pids", "freezer")
PARENT = "phalanx"
CPU_PERIOD_US = 100_000


def _own_path(controller: str) -> str | None:
    """This process's cgroup in the v1 hierarchy of ``controller`` ("" for v2), None if not in one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller == "" and names == "") or controller in names.split(","):
            return path.lstrip("/")
    return None


def _v1_parents() -> dict[str, Path] | None:
    """controller -> the folder a replica's cgroup is made in, when every V1 hierarchy is writable."""
    out: dict[str, Path] = {}
    for controller in V1:
        mount = ROOT / controller
        own = _own_path(controller)
        if own is None or not (mount / "cgroup.procs").exists():
            return None
        parent = mount / own / PARENT
        try:
            parent.mkdir(exist_ok=True)
        except OSError:
            return None
        out[controller] = parent
    return out


def _v2_parent() -> Path | None:
    """The v2 folder a replica's cgroup is made in, when its parent delegates memory and pids."""
    own = _own_path("")
    for mount in (ROOT, ROOT / "unified"):
        if own is None or not (mount / "cgroup.controllers").exists():
            continue
        base = mount / own
        try:
            enabled = (base / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if "memory" in enabled and "pids" in enabled and os.access(base, os.W_OK):
            parent = base / PARENT
            with contextlib.suppress(OSError):
                parent.mkdir(exist_ok=True)
                (parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                return parent
    return None


def describe() -> str:
    """What boxes get on this machine, in words (the server's start line)."""
    if _v1_parents() is not None:
        return "cgroup v1 (memory, cpu, pids, freezer)"
    if _v2_parent() is not None:
        return "cgroup v2 (memory, pids, cpu)"
    return "no writable cgroups (memory kept by the reaper's watchdog, no process-count limit)"


def remove_empty(left: Callable[[str], bool]) -> None:
    """Remove the cgroups whose name ``left`` says a holder left behind, once they hold no process
    (one with a process in it stays: rmdir refuses it). Every Phalanx process of this machine under
    one parent cgroup makes its cgroups in the same folder, so ``left`` must say no to any name
    another process may have just made and not yet joined."""
    parents = list((_v1_parents() or {}).values()) or [p for p in (_v2_parent(),) if p is not None]
    for parent in parents:
        for folder in parent.iterdir() if parent.is_dir() else ():
            if left(folder.name):
                with contextlib.suppress(OSError):
                    os.rmdir(folder)


class Cgroup(Record):
    """One replica's cgroup: a folder per v1 controller, or one v2 folder (``v2``). A ``Record``:
    every replica's reaper imports this module."""

    __slots__ = ("folders", "v2")

    def __init__(self, folders: tuple[str, ...], v2: bool = False) -> None:
        self.folders = folders
        self.v2 = v2

    @classmethod
    def create(
        cls, name: str, *, memory_bytes: int | None, cpus: int | None, pids_max: int | None
    ) -> Cgroup | None:
        """Make it with these limits (None: not limited); None when this machine has none we may
        write (the caller then falls back to its watchdog)."""
        v1 = _v1_parents()
        if v1 is not None:
            folders = {c: parent / name for c, parent in v1.items()}
            for folder in folders.values():
                folder.mkdir(exist_ok=True)
            made = cls(tuple(str(f) for f in folders.values()))
            made._limit_v1(folders, memory_bytes, cpus, pids_max)
            return made
        parent = _v2_parent()
        if parent is None:
            return None
        folder = parent / name
        folder.mkdir(exist_ok=True)
        made = cls((str(folder),), v2=True)
        made._limit_v2(folder, memory_bytes, cpus, pids_max)
        return made

    @staticmethod
    def _limit_v1(folders: dict[str, Path], memory: int | None, cpus: int | None, pids: int | None) -> None:
        if memory:
            (folders["memory"] / "memory.limit_in_bytes").write_text(str(memory))
            with contextlib.suppress(OSError):  # no swap accounting on this kernel: nothing to cap
                (folders["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory))
        if cpus:
            (folders["cpu"] / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (folders["cpu"] / "cpu.cfs_quota_us").write_text(str(cpus * CPU_PERIOD_US))
        if pids:
            (folders["pids"] / "pids.max").write_text(str(pids))

    @staticmethod
    def _limit_v2(folder: Path, memory: int | None, cpus: int | None, pids: int | None) -> None:
        if memory:
            (folder / "memory.max").write_text(str(memory))
            with contextlib.suppress(OSError):
                (folder / "memory.swap.max").write_text("0")
        if cpus:
            with contextlib.suppress(OSError):  # cpu not delegated: the affinity still holds
                (folder / "cpu.max").write_text(f"{cpus * CPU_PERIOD_US} {CPU_PERIOD_US}")
        if pids:
            (folder / "pids.max").write_text(str(pids))

    def join(self, pid: int = 0) -> None:
        """Move a process (0: the calling one) into it; its children are born inside."""
        for folder in self.folders:
            Path(folder, "cgroup.procs").write_text(str(pid or os.getpid()))

    def procs(self) -> list[int]:
        """Every live process in it (zombies included until reaped)."""
        pids: set[int] = set()
        for folder in self.folders:
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in Path(folder, "cgroup.procs").read_text().split())
        return sorted(pids)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of it for going over its memory limit."""
        for folder in self.folders:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    words = Path(folder, name).read_text().split()
                except OSError:
                    continue
                if "oom_kill" in words and int(words[words.index("oom_kill") + 1]) > 0:
                    return True
        return False

    def _freezer(self) -> Path | None:
        if self.v2:
            path = Path(self.folders[0], "cgroup.freeze")
            return path if path.exists() else None
        found = [Path(f, "freezer.state") for f in self.folders]
        return next((p for p in found if p.exists()), None)

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL every process in it at once: frozen first, so none can fork a new one meanwhile
        (where a freezer is available), then thawed so the kills are delivered."""
        freezer = self._freezer()
        frozen = "1" if self.v2 else "FROZEN"
        thawed = "0" if self.v2 else "THAWED"
        deadline = time.monotonic() + timeout
        while True:
            pids = self.procs()
            if not pids or time.monotonic() > deadline:
                return
            if freezer is not None:
                with contextlib.suppress(OSError):
                    freezer.write_text(frozen)
            signal_all(pids, signal.SIGKILL)
            if freezer is not None:
                with contextlib.suppress(OSError):
                    freezer.write_text(thawed)
            time.sleep(0.02)

    def remove(self) -> None:
        """Remove its folders (once it is empty; a folder still holding a process stays)."""
        for folder in self.folders:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
