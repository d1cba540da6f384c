"""What a replica's process tree uses, read from /proc: memory counted once, CPU, threads, I/O.

Two users share it: the reaper's memory watchdog (where no cgroup v2 can be written) and the
supervisor's system-metrics sampler. Both must not count a page twice: after ``fork`` a parent and
its ``DataLoader`` workers share most pages, and summing RSS counts them once per process (a 378 MiB
job read as 1.4 GiB). The proportional set size (``Pss`` in /proc/PID/smaps_rollup) splits every
shared page between the processes mapping it, so the tree's PSS counts each page once. Files in
/dev/shm hold memory without being mapped (written and closed, or kept open): those the tree has
open, or had open at an earlier look and that still exist, are added at their allocated size unless
a process of the tree maps them (then their pages are in the PSS already). Standard library only:
the reaper imports this module.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

from phalanx.machine.record import Record

SHM = "/dev/shm/"
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024


def _pss_bytes(pid: int) -> int | None:
    """The process's proportional set size, or None when smaps_rollup cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def own_bytes(pid: int) -> int | None:
    """The memory only this process holds (smaps_rollup's Private_Clean and Private_Dirty), or None
    when smaps_rollup cannot be read. A replica's reaper forked from its supervisor shares most of
    its resident pages with it, copy-on-write: its RSS counts them again."""
    total: int | None = None
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith((b"Private_Clean:", b"Private_Dirty:")):
                    total = (total or 0) + int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return total


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _shm_open(pid: int) -> dict[tuple[int, int], tuple[str, int]]:
    """(dev, inode) -> (path, allocated bytes) of the /dev/shm files this process has open."""
    out: dict[tuple[int, int], tuple[str, int]] = {}
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
            if not target.startswith(SHM):
                continue
            st = os.stat(f"{fd_dir}/{name}")  # follows the fd, so an unlinked file is still seen
        except OSError:
            continue
        out[(st.st_dev, st.st_ino)] = (target.removesuffix(" (deleted)"), st.st_blocks * 512)
    return out


def _shm_mapped(pid: int) -> set[str]:
    """Paths of /dev/shm files this process maps (their pages are in its PSS)."""
    out: set[str] = set()
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            for line in f:
                idx = line.find(b" /dev/shm/")
                if idx >= 0:
                    out.add(line[idx + 1 :].decode(errors="replace").strip().removesuffix(" (deleted)"))
    except OSError:
        pass
    return out


class MemoryWatch:
    """The memory of one process tree, each page counted once, across successive looks (it remembers
    the /dev/shm files the tree has had open, so one written then closed still counts)."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, int], str] = {}  # shm (dev, inode) -> path

    def usage(self, pids: Iterable[int]) -> MemoryUse:
        pss = 0
        rss = 0
        exact = True
        opened: dict[tuple[int, int], tuple[str, int]] = {}
        mapped: set[str] = set()
        for pid in pids:
            value = _pss_bytes(pid)
            r = _rss_bytes(pid)
            rss += r
            if value is None:
                exact = False
                value = r  # no smaps_rollup (an old kernel, another user's process): RSS
            pss += value
            opened.update(_shm_open(pid))
            mapped |= _shm_mapped(pid)
        for key, (path, _) in opened.items():
            self.known[key] = path
        shm = 0
        for key, path in list(self.known.items()):
            if key in opened:
                held_path, size = opened[key]
            else:
                try:
                    st = os.stat(path)
                except OSError:
                    del self.known[key]  # removed and closed: its memory is free again
                    continue
                if (st.st_dev, st.st_ino) != key:
                    del self.known[key]
                    continue
                held_path, size = path, st.st_blocks * 512
            if held_path not in mapped:
                shm += size
        return MemoryUse(pss=pss, shm=shm, rss=rss, exact=exact)


class MemoryUse(Record):
    """``pss``: bytes, the proportional set size of the tree (RSS where PSS cannot be read); ``shm``:
    bytes of /dev/shm files the tree holds but does not map; ``rss``: the plain RSS sum (shared pages
    counted per process), for comparison only; ``exact``: False when some process's PSS could not be
    read."""

    __slots__ = ("exact", "pss", "rss", "shm")

    def __init__(self, pss: int, shm: int, rss: int, exact: bool = True) -> None:
        self.pss, self.shm, self.rss, self.exact = pss, shm, rss, exact

    @property
    def total(self) -> int:
        return self.pss + self.shm


# ---- CPU, threads, I/O (the system-metrics sampler) --------------------------------------------


class TreeSample(Record):
    """One look at a process tree: cumulative counters (CPU seconds, I/O bytes) and levels. ``time``:
    time.monotonic() of the look; ``cpu_seconds``: user + system of the live processes plus their
    reaped children."""

    __slots__ = ("cpu_seconds", "processes", "pss", "read_bytes", "rss", "threads", "time", "write_bytes")

    def __init__(
        self,
        time: float,
        cpu_seconds: float,
        rss: int,
        pss: int,
        threads: int,
        processes: int,
        read_bytes: int,
        write_bytes: int,
    ) -> None:
        self.time, self.cpu_seconds, self.rss, self.pss = time, cpu_seconds, rss, pss
        self.threads, self.processes = threads, processes
        self.read_bytes, self.write_bytes = read_bytes, write_bytes


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].split()


def age_seconds(pid: int) -> float | None:
    """How long ago the process started (its stat's starttime against the boot clock), or None."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    try:
        # starttime is field 22 of proc(5): index 19 from the state field; ticks since boot
        return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / TICKS
    except (ValueError, AttributeError, OSError):
        return None


def _io(pid: int) -> tuple[int, int]:
    read = write = 0
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            for line in f:
                if line.startswith(b"read_bytes:"):
                    read = int(line.split()[1])
                elif line.startswith(b"write_bytes:"):
                    write = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return read, write


def sample_tree(pids: Iterable[int], now: float, with_pss: bool = True) -> TreeSample:
    """CPU seconds (utime + stime + cutime + cstime: a worker that exited still counts, through its
    waiting parent), RSS, PSS, threads and block I/O of these processes together."""
    cpu = 0.0
    rss = pss = threads = count = read = write = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None or len(fields) < 22 or fields[0] == b"Z":
            continue
        count += 1
        # fields start at state (field 3 of proc(5)): utime is field 14 -> index 11
        cpu += sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS
        threads += int(fields[17])
        r = int(fields[21]) * PAGE
        rss += r
        if with_pss:
            p = _pss_bytes(pid)
            pss += r if p is None else p
        rd, wr = _io(pid)
        read += rd
        write += wr
    return TreeSample(now, cpu, rss, pss, threads, count, read, write)


def children_map() -> dict[int, list[int]]:
    """ppid -> pids, read from /proc in one pass."""
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: fields start after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            out.setdefault(int(fields[1]), []).append(int(entry.name))
    return out


def descendants(root: int, tree: Mapping[int, list[int]] | None = None) -> list[int]:
    """Every process below ``root`` (not root itself)."""
    tree = children_map() if tree is None else tree
    out: list[int] = []
    todo = list(tree.get(root, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(tree.get(pid, ()))
    return out


def memory_label(mib: float) -> str:
    """1024 -> "1024Mi", the unit the experiment file uses."""
    return f"{mib:g}Mi"


def memory_exceeded_reason(mib: float) -> str:
    return f"memory limit {memory_label(mib)} exceeded"
