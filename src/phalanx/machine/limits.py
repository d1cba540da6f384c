"""Resources on this machine: CPU affinity, memory limits and GPU assignment for local replicas.

The plan's requests are checked against what the machine has before anything starts (more GPUs than
exist is always refused; more cores or memory than exist unless the user oversubscribes). Limits
become a CPU affinity set plus OMP/MKL thread counts, a memory cap enforced per replica (cgroup v2
where it is writable, else a watchdog over the replica's process tree, run by its reaper) and
disjoint CUDA_VISIBLE_DEVICES. The reaper sees a replica's processes and memory through
``proctree`` alone, so it never imports this module (nor the domain and the ledger it needs).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from phalanx import knobs
from phalanx.domain import Resources, plural
from phalanx.errors import UsageError
from phalanx.machine.ledger import bases, cores_counted, memory_counted
from phalanx.machine.proctree import MIB, memory_label

# Replicas one experiment may have. A file asking for more is almost always a typo (n_workers:
# 1000000 used to make `phalanx check` expand a million replicas: 14 minutes, 7.6 GB); a larger
# cluster job raises it with PHALANX_MAX_REPLICAS (docs/experiment-file.md).
MAX_REPLICAS = 1024
ENV_MAX_REPLICAS = "PHALANX_MAX_REPLICAS"
MAX_PROCESSES_PER_REPLICA = 1024


def max_replicas() -> int:
    """The replica bound in force: PHALANX_MAX_REPLICAS when it holds a positive whole number."""
    return knobs.MAX_REPLICAS.value()


def replicas_over_limit(n: int) -> str | None:
    """Why ``n`` replicas are refused, or None when they are within the bound."""
    limit = max_replicas()
    if n <= limit:
        return None
    return (
        f"{n} replicas is more than the {limit} one experiment may have; lower it, or raise the bound"
        f" with {ENV_MAX_REPLICAS}={n} when the cluster really has room for them"
    )


@dataclass(frozen=True)
class Machine:
    cpus: tuple[int, ...]  # the CPUs this process may run on
    memory_mib: float
    gpus: tuple[str, ...]  # device indices (or UUIDs) of the GPUs present


@dataclass(frozen=True)
class ReplicaLimits:
    """What the local engine enforces for one replica (None: not limited)."""

    cpus: tuple[int, ...] | None = None
    threads: int | None = None  # OMP_NUM_THREADS / MKL_NUM_THREADS per process
    memory_mib: float | None = None
    gpus: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "cpus": list(self.cpus) if self.cpus is not None else None,
            "threads": self.threads,
            "memory": memory_label(self.memory_mib) if self.memory_mib is not None else None,
            "gpus": list(self.gpus) if self.gpus is not None else None,
        }


def detect_gpus() -> tuple[str, ...]:
    """GPUs present, via nvidia-smi (NVML's command-line face); CUDA_VISIBLE_DEVICES narrows them."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    smi = shutil.which("nvidia-smi")
    found: tuple[str, ...] = ()
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=index", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
            found = tuple(line.strip() for line in out.splitlines() if line.strip())
        except (OSError, subprocess.SubprocessError):
            found = ()
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        return tuple(v for v in wanted if not found or v in found or not v.isdigit())
    return found


def machine() -> Machine:
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    return Machine(cpus=cpus, memory_mib=_mem_total_mib(), gpus=detect_gpus())


def _mem_total_mib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / MIB


def _asked(r: Resources, what: str) -> float:
    rng = getattr(r, what)
    value = rng.requests if rng.requests is not None else rng.limits
    return float(value or 0)


def allocate(
    replicas: Sequence[tuple[str, Resources, int]], here: Machine, oversubscribe: bool = False
) -> dict[str, ReplicaLimits]:
    """Check the topology fits this machine and give each replica its CPUs, memory cap and GPUs.

    ``replicas`` is (name, resources, processes) per replica. Raises UsageError (exit 2) before
    anything starts when the GPUs asked for are not there, or when cores or memory are short and
    ``oversubscribe`` is false.
    """
    gpus = _refuse_gpus(replicas, here)
    if not oversubscribe:
        _refuse_over(replicas, "cpu", len(here.cpus), "cpu cores", "cores")
        _refuse_over(replicas, "memory", here.memory_mib, "MiB of memory", "MiB")
    out: dict[str, ReplicaLimits] = {}
    cursor = 0
    gpu_cursor = 0
    for name, res, processes in replicas:
        cpus: tuple[int, ...] | None = None
        threads: int | None = None
        if res.cpu.limits:
            n = max(1, math.ceil(res.cpu.limits))
            n = min(n, len(here.cpus))
            cpus = tuple(here.cpus[(cursor + i) % len(here.cpus)] for i in range(n))
            cursor += n
            threads = max(1, math.floor(res.cpu.limits / max(1, processes)))
        assigned: tuple[str, ...] | None = None
        if gpus[name]:
            assigned = here.gpus[gpu_cursor : gpu_cursor + gpus[name]]
            gpu_cursor += gpus[name]
        elif any(gpus.values()):
            # in a GPU experiment a replica that asked for none sees none (as on Kubernetes), so it
            # cannot take memory on a GPU given to another replica
            assigned = ()
        memory = float(res.memory.limits) if res.memory.limits else None
        out[name] = ReplicaLimits(cpus=cpus, threads=threads, memory_mib=memory, gpus=assigned)
    return out


def _refuse_gpus(replicas: Sequence[tuple[str, Resources, int]], here: Machine) -> dict[str, int]:
    """The GPUs each replica asks for; UsageError when this machine has fewer (always refused:
    a GPU cannot be shared the way a core can)."""
    gpus = {name: math.ceil(_asked(res, "gpu")) for name, res, _ in replicas}
    if sum(gpus.values()) > len(here.gpus):
        asked = ", ".join(f"{n} {g}" for n, g in gpus.items() if g)
        raise UsageError(
            f"the experiment asks for {sum(gpus.values())} GPU(s) ({asked}) but this machine has "
            f"{len(here.gpus)}; lower the gpu requests or run it on a cluster (--cluster NAME)"
        )
    return gpus


def _refuse_over(
    replicas: Sequence[tuple[str, Resources, int]], what: str, have: float, noun: str, unit: str
) -> None:
    """Refuse a topology larger than this machine, counted by the ledger's one rule (cores: the cpu
    limits, as they are pinned, or the requests where no limit is given), so this early refusal, the
    dry run, `phalanx check` and the queue agree, and the message names what was counted."""
    count = cores_counted if what == "cpu" else memory_counted
    asked = [(n, *count(res)) for n, res, _ in replicas]
    total = sum(v for _, v, _ in asked)
    if total > have + 1e-9:
        detail = ", ".join(f"{n} {v:g}" for n, v, _ in asked if v)
        basis = bases([b for _, _, b in asked])
        raise UsageError(
            f"the experiment needs {total:g} {noun} on this machine, counted from the {what} {basis}"
            f" ({detail}) but this machine has {have:g} {unit}; lower the {what} {basis}, or pass"
            " --oversubscribe to run anyway" + (_PINNED if what == "cpu" else "")
        )


# why the count is limits and not requests: said once, where a user meets it
_PINNED = (
    " (the local engine pins each replica to its cpu limit, so this machine counts limits, or the"
    " request where no limit is given; clusters schedule on requests)"
)


def size_notes(replicas: Sequence[tuple[str, Resources, int]], here: Machine) -> list[str]:
    """What `phalanx check` says when the topology is larger than this machine (none: it fits):
    every refusal `phalanx run` could answer with (GPUs, cores, memory), in its words, as notes,
    since the file may be meant for a cluster."""
    checks = (
        lambda: _refuse_gpus(replicas, here),
        lambda: _refuse_over(replicas, "cpu", len(here.cpus), "cpu cores", "cores"),
        lambda: _refuse_over(replicas, "memory", here.memory_mib, "MiB of memory", "MiB"),
    )
    notes = []
    for check in checks:
        try:
            check()
        except UsageError as exc:
            notes.append(f"`phalanx run` on this machine would refuse it: {exc}")
    return notes


def crowding_warning(replicas: Sequence[tuple[str, Resources, int]], here: Machine) -> str | None:
    """A warning when the replicas that request no cores start more processes than this machine
    has cores: each then gets a fraction of a core, and training (or a collective's timeout) is
    slow for reasons nothing else would name. None when they fit."""
    loose = [(n, procs) for n, res, procs in replicas if not _asked(res, "cpu")]
    processes = sum(p for _, p in loose)
    if processes <= len(here.cpus):
        return None
    return (
        f"{plural(processes, 'process', 'processes')} ({plural(len(loose), 'replica')} without cpu requests)"
        f" will share this machine's {plural(len(here.cpus), 'core')} and run slowly; give the replicas"
        " `resources: {cpu: {requests: N}}`"
        " (Phalanx then refuses what does not fit), lower n_workers, or run on a cluster (--cluster NAME)"
    )


def limit_env(limits: ReplicaLimits, user_env: Mapping[str, str]) -> dict[str, str]:
    """Thread counts and visible GPUs for a replica's processes (the user's own settings win)."""
    env: dict[str, str] = {}
    if limits.threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            if var not in user_env:
                env[var] = str(limits.threads)
    if limits.gpus is not None and "CUDA_VISIBLE_DEVICES" not in user_env:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(limits.gpus)
    return env


# ---- memory enforcement -------------------------------------------------------------------------


def cgroup_v2_root() -> Path | None:
    """The cgroup v2 folder a replica's cgroup can be made in, or None (then the watchdog is used)."""
    root = Path("/sys/fs/cgroup")
    try:
        here = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v2 = [line.split(":", 2)[2] for line in here if line.startswith("0::")]
    if not v2 or not (root / "cgroup.controllers").exists():
        return None  # a v1 or hybrid hierarchy
    parent = root / v2[0].lstrip("/")
    try:
        if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            return None
    except OSError:
        return None
    return parent if os.access(parent, os.W_OK) else None
