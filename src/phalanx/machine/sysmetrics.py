"""System metrics: every few seconds, each replica's process tree as scalar series ``system/...``.

The sampler runs in the supervisor (a thread of `phalanx run`, never in a training process, so the
training thread pays nothing) or, on a cluster node, as ``python -m phalanx.machine.sysmetrics`` beside the
replica. Each look reads /proc once for the whole machine (parent links), then per replica its tree:
CPU % (user + system seconds since the last look, over the wall time; 100 = one core), resident
memory, threads, processes, and block I/O bytes read and written (/proc/PID/io). Network bytes are
not per process on Linux (/proc/PID/net/dev is the whole network namespace), so they are not
recorded. GPU utilisation and memory come from NVIDIA's library (libnvidia-ml, through ctypes) when
it loads, per device the replica's processes use; without it the GPU series are simply absent.
That path has only run against a fake NVML (tests/unit/test_sysmetrics_nvml.py), never a real GPU.

Points go to a spool stream of their own, so ingest stores them like any reported scalar (exactly
once), with the replica as the series: ``system/cpu_percent`` / ``master``. The step is the whole
seconds since the sampler started. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from phalanx import knobs
from phalanx.machine import proctree
from phalanx.spool import SpoolWriter, encode_points, new_stream_id

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = knobs.DEFAULT_SAMPLE_SECONDS
MIB = 1024 * 1024
FIRST_LOOK_SECONDS = 1.0  # after the replicas start
MIN_AGE_SECONDS = 0.5  # a younger process: too few clock ticks for a meaningful first CPU %


@dataclass(frozen=True)
class Target:
    """One replica to sample: the root of its process tree and who it is."""

    pid: int
    replica: str
    role: str = "master"
    index: int = 0
    rank: int | None = None


NVML_LIBRARY = "libnvidia-ml.so.1"
_NVML_SUCCESS = 0
_NVML_INSUFFICIENT_SIZE = 7
_NVML_UNAVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE in usedGpuMemory


def _load_nvml() -> Any:
    """NVIDIA's library, or OSError where it is not installed (every machine without the driver)."""
    return ctypes.CDLL(NVML_LIBRARY)


class _Nvml:
    """The few NVML calls needed, through ctypes; ``ok`` is False when the library is not there.

    ``lib`` is the loaded library: ctypes' handle on libnvidia-ml by default, or anything with the
    same functions (the tests' fake NVML, which writes the structures as the C library does)."""

    class _Util(ctypes.Structure):  # nvmlUtilization_t
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    class _Mem(ctypes.Structure):  # nvmlMemory_t
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    class _Proc(ctypes.Structure):  # nvmlProcessInfo_t, v2 layout: what the _v2/_v3 getters fill
        _fields_ = [
            ("pid", ctypes.c_uint),
            ("usedGpuMemory", ctypes.c_ulonglong),
            ("gpuInstanceId", ctypes.c_uint),
            ("computeInstanceId", ctypes.c_uint),
        ]

    class _ProcV1(ctypes.Structure):  # nvmlProcessInfo_v1_t: what the unversioned getter fills (old drivers)
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

    # newest first; each with the layout of the array it fills
    _GETTERS = (
        ("nvmlDeviceGetComputeRunningProcesses_v3", _Proc),
        ("nvmlDeviceGetComputeRunningProcesses_v2", _Proc),
        ("nvmlDeviceGetComputeRunningProcesses", _ProcV1),
    )

    def __init__(self, lib: Any = None) -> None:
        self.ok = False
        self.handles: list[ctypes.c_void_p] = []
        try:
            self.lib = lib if lib is not None else _load_nvml()
            if self.lib.nvmlInit_v2() != _NVML_SUCCESS:
                return
            count = ctypes.c_uint()
            if self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
                return
            for i in range(count.value):
                handle = ctypes.c_void_p()
                if self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) == _NVML_SUCCESS:
                    self.handles.append(handle)
                else:  # indices must stay the driver's: gpu<N> is device N, as nvidia-smi numbers it
                    self.handles.append(ctypes.c_void_p())
            self.ok = any(h.value for h in self.handles)
        except Exception:  # no library, an old one without these symbols, or one that misbehaves
            self.ok = False

    def _processes(self, handle: ctypes.c_void_p) -> list[tuple[int, int | None]] | None:
        """(pid, bytes or None when NVML cannot say) of the compute processes on a device."""
        for name, layout in self._GETTERS:
            fn = getattr(self.lib, name, None)
            if fn is None:
                continue
            size = 64
            for _ in range(3):  # NVML says how many there are when the array is too small
                n = ctypes.c_uint(size)
                procs = (layout * size)()
                rc = fn(handle, ctypes.byref(n), procs)
                if rc == _NVML_INSUFFICIENT_SIZE and n.value > size:
                    size = n.value + 8  # processes may start between the two calls
                    continue
                if rc != _NVML_SUCCESS:
                    return None
                return [
                    (int(p.pid), None if p.usedGpuMemory >= _NVML_UNAVAILABLE else int(p.usedGpuMemory))
                    for p in procs[: min(n.value, size)]
                ]
            return None
        return None

    def devices_of(self, pids: set[int]) -> dict[int, int | None]:
        """device index -> bytes of its memory the given processes use (None: NVML cannot say),
        for the devices they use only."""
        out: dict[int, int | None] = {}
        for i, handle in enumerate(self.handles):
            if not handle.value:
                continue
            procs = self._processes(handle)
            used = [m for pid, m in procs or [] if pid in pids]
            if used:
                known = [m for m in used if m is not None]
                out[i] = sum(known) if known else None
        return out

    def utilisation(self, index: int) -> float | None:
        """The device's utilisation in percent over NVML's last sample period (the whole device)."""
        util = self._Util()
        if self.lib.nvmlDeviceGetUtilizationRates(self.handles[index], ctypes.byref(util)) != _NVML_SUCCESS:
            return None
        return float(util.gpu)


def _rss(sample: proctree.TreeSample, leader: int, now: float) -> int:
    """The resident memory of a replica's tree, its leader counted by what it alone holds: a reaper
    forked from its supervisor shares most of its pages with it (40 MB and more), which its RSS
    would count as the replica's."""
    own = proctree.own_bytes(leader)
    if own is None:
        return sample.rss
    return max(0, sample.rss - proctree.sample_tree([leader], now, with_pss=False).rss + own)


class Sampler:
    """Looks at each target's tree and turns two successive looks into points."""

    def __init__(self, with_gpu: bool = True, nvml_lib: Any = None) -> None:
        self.started = time.monotonic()
        self._last: dict[int, proctree.TreeSample] = {}
        self._nvml: _Nvml | None = _Nvml(nvml_lib) if with_gpu else None
        self.cost_seconds = 0.0  # CPU time this sampler's looks took (the bench's figure)

    def points(self, targets: list[Target]) -> list[tuple[Target, list[tuple[str, float]]]]:
        """(target, [(title, value), ...]) for each target alive now; CPU % over the time since the
        last look (at the first look: since the replica started)."""
        cpu0 = time.thread_time()
        tree = proctree.children_map()
        now = time.monotonic()
        out: list[tuple[Target, list[tuple[str, float]]]] = []
        live = set()
        for t in targets:
            pids = [t.pid, *proctree.descendants(t.pid, tree)]
            sample = proctree.sample_tree(pids, now, with_pss=False)
            if sample.processes == 0:
                continue
            live.add(t.pid)
            values: list[tuple[str, float]] = [
                ("system/rss_mib", _rss(sample, t.pid, now) / MIB),
                ("system/threads", float(sample.threads)),
                ("system/processes", float(sample.processes)),
                ("system/disk_read_mib", sample.read_bytes / MIB),
                ("system/disk_write_mib", sample.write_bytes / MIB),
            ]
            prev = self._last.get(t.pid)
            if prev is not None and now > prev.time:
                cpu = max(0.0, sample.cpu_seconds - prev.cpu_seconds) / (now - prev.time) * 100.0
                values.insert(0, ("system/cpu_percent", cpu))
            elif prev is None:
                # the first look at this replica: its CPU since it started, so a replica that lives
                # less than two looks (a short run, a restarted group's last minutes) still has one
                age = proctree.age_seconds(t.pid)
                if age is not None and age >= MIN_AGE_SECONDS:
                    values.insert(0, ("system/cpu_percent", sample.cpu_seconds / age * 100.0))
            self._last[t.pid] = sample
            values.extend(self._gpu(set(pids)))
            out.append((t, values))
        for pid in list(self._last):
            if pid not in live:
                del self._last[pid]
        self.cost_seconds += time.thread_time() - cpu0
        return out

    def _gpu(self, pids: set[int]) -> list[tuple[str, float]]:
        nvml = self._nvml
        if nvml is None or not nvml.ok:
            return []
        values: list[tuple[str, float]] = []
        try:
            for index, used in sorted(nvml.devices_of(pids).items()):
                util = nvml.utilisation(index)
                if util is not None:
                    values.append((f"system/gpu{index}_util_percent", util))
                if used is not None:
                    values.append((f"system/gpu{index}_memory_mib", used / MIB))
        except Exception:
            # An error code costs the GPU series of one look; a library that raises (a bad build, a
            # ctypes mismatch) would raise on every look, so GPU sampling stops and the rest goes on.
            log.warning("system metrics: NVML failed; GPU series are off for this run", exc_info=True)
            nvml.ok = False
            return []
        return values


class SystemMetrics:
    """A daemon thread sampling ``targets()`` every ``interval`` seconds into a spool stream."""

    def __init__(
        self,
        spool_dir: os.PathLike[str] | str,
        experiment_id: str,
        targets: Callable[[], list[Target]],
        interval: float = DEFAULT_INTERVAL,
        stream: str | None = None,
    ) -> None:
        self.interval = interval
        self._targets = targets
        # inside a Slurm task the sampler restarts at step 0 with a requeued attempt: its attempt
        # (PHALANX_ATTEMPT) makes the new samples replace the old ones (store.sql.attempts)
        raw = os.environ.get("PHALANX_ATTEMPT", "").strip()
        self.writer = SpoolWriter(
            spool_dir,
            experiment_id=experiment_id,
            stream=stream or new_stream_id(),
            attempt=int(raw) if raw.isdigit() else None,
        )
        self.sampler = Sampler()
        self.cost_seconds = 0.0  # CPU time of the looks, writing included (bench/system_metrics.py)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="system-metrics", daemon=True)

    def start(self) -> SystemMetrics:
        self._thread.start()
        return self

    def look(self) -> int:
        """One look: sample and write; returns the number of points written."""
        cpu0 = time.thread_time()
        now = time.time()
        step = int(time.monotonic() - self.sampler.started)
        records = []

        for target, values in self.sampler.points(self._targets()):
            if not values:
                continue
            points = [(title, target.replica, step, value, now) for title, value in values]
            records.append(
                self.writer.record(
                    "scalar",
                    encode_points(points),
                    replica=target.replica,
                    role=target.role,
                    index=target.index,
                    rank=target.rank,
                )
            )
        if records:
            self.writer.append(records)
        self.cost_seconds += time.thread_time() - cpu0
        return sum(r["data"]["n"] for r in records)

    def _run(self) -> None:
        # Looks at once (a replica that lives under a second still gets its memory and threads),
        # again after FIRST_LOOK_SECONDS (a run shorter than one interval still gets a CPU %: a
        # just-started process has used too little CPU to measure), then every interval.
        for wait in first_waits(self.interval):
            try:
                self.look()
            except ValueError:  # the writer was closed under us at shutdown
                return
            except Exception:  # sampling must never take the supervisor down
                log.exception("system metrics: a look failed")
            if self._stop.wait(wait):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self.writer.close()


def first_waits(interval: float) -> Iterator[float]:
    """The pauses after each look: FIRST_LOOK_SECONDS after the first (at the start), then
    ``interval`` for ever."""
    yield min(interval, FIRST_LOOK_SECONDS)
    while True:
        yield interval


def interval_from_env() -> float | None:
    """PHALANX_SYSTEM_METRICS (``knobs.SYSTEM_METRICS``): the seconds between samples, None when
    off; a malformed value is a UsageError naming it (`phalanx run` checks it before anything starts)."""
    return knobs.SYSTEM_METRICS.value()


def main(argv: list[str] | None = None) -> int:
    """``python -m phalanx.machine.sysmetrics --pid PID``: sample one replica's tree (a cluster node) into
    PHALANX_SPOOL, as the replica named by PHALANX_REPLICA, until the process is gone."""
    parser = argparse.ArgumentParser(prog="python -m phalanx.machine.sysmetrics")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--interval", type=float, default=None)
    args = parser.parse_args(argv)
    interval = args.interval or interval_from_env()
    env = os.environ
    exp = env.get("PHALANX_EXPERIMENT_ID")
    if interval is None or not exp:
        return 0
    home = env.get("PHALANX_HOME") or os.path.expanduser("~/.phalanx")
    spool = env.get("PHALANX_SPOOL") or os.path.join(home, "spool", exp)
    rank = env.get("PHALANX_RANK", "")
    target = Target(
        args.pid,
        env.get("PHALANX_REPLICA", "master"),
        env.get("PHALANX_ROLE", "master"),
        int(env.get("PHALANX_INDEX") or 0),
        int(rank) if rank.isdigit() else None,
    )
    metrics = SystemMetrics(spool, exp, lambda: [target], interval)
    try:
        for wait in first_waits(interval):  # as the supervisor's thread: see _run
            if not os.path.exists(f"/proc/{args.pid}"):
                break
            metrics.look()
            time.sleep(wait)
    finally:
        metrics.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
