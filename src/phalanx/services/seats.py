"""What a notebook server holds of the machine: a `kind: notebook` file's ``environment:
resources:`` taken in the machine's ledger (phalanx.machine.ledger), as an experiment's are, for as
long as it runs (docs/services.md).

Cores and GPUs are taken whole and by name: the notebook server and its kernels run on those cores
(the affinity of the thread that starts it, which every process it starts inherits), see those GPUs
only (``CUDA_VISIBLE_DEVICES``) and start that many threads per math library. Where this machine
lets Phalanx write a cgroup, it caps their memory and holds their CPU time to those cores' worth
(a process may widen its own affinity, never leave its cgroup); elsewhere memory is counted only. A
notebook does not queue: a person waits at the other end, so a ledger with no room now is said at
once, with who holds what. The seat is given back when the notebook stops, and a process that held
one and died is reclaimed by the ledger's next reader, as an experiment's supervisor is.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx import share
from phalanx.domain import Range, Resources
from phalanx.errors import Conflict, UsageError
from phalanx.machine import cgroups, limits, proctree
from phalanx.machine.ledger import (
    SERVICE_PREFIXES,
    Capacity,
    Grant,
    Ledger,
    Need,
    NeverFits,
    NoRoom,
    need_of,
    never_fits,
    reclaim,
)
from phalanx.share import Limit

MIB = 1024 * 1024
# one shell between the caller and the program: it moves itself into the cgroup's folders (its
# children are born there), then becomes the program; a folder it cannot join stops it (exit 126),
# so nothing runs outside its cap
_JOIN = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 126; shift; n=$((n-1)); done; exec "$@"'


@dataclass(frozen=True)
class Seat:
    """A notebook's place in the ledger (``key``): the cores, GPUs and memory it was granted, and
    the cgroup that caps its memory (None: none could be made here)."""

    key: str
    grant: Grant
    cgroup: cgroups.Cgroup | None = None

    def env(self) -> dict[str, str]:
        """Thread counts for its cores, and its GPUs as the only ones visible."""
        threads = len(self.grant.cpus) or None
        return limits.limit_env(limits.ReplicaLimits(threads=threads, gpus=self.grant.gpus), {})

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` started inside its cgroup (unchanged when it has none)."""
        if self.cgroup is None:
            return argv
        procs = [os.path.join(folder, "cgroup.procs") for folder in self.cgroup.folders]
        return ["/bin/sh", "-c", _JOIN, "sh", str(len(procs)), *procs, *argv]

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """The calling thread on its cores while the block runs: a process started there inherits
        them (Linux's affinity is per thread; pid 0 is the caller)."""
        if not self.grant.cpus:
            yield
            return
        was = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.grant.cpus)
        try:
            yield
        finally:
            os.sched_setaffinity(0, was)

    def describe(self) -> str:
        parts = []
        if self.grant.cpus:
            parts.append(f"cores {','.join(map(str, self.grant.cpus))}")
        if self.grant.gpus:
            parts.append(f"GPUs {','.join(self.grant.gpus)}")
        if self.grant.memory_mib:
            capped = "capped" if self.cgroup is not None else "counted, not capped here"
            parts.append(f"{proctree.memory_label(self.grant.memory_mib)} ({capped})")
        return ", ".join(parts)


def take_seat(
    ledger: Ledger,
    key: str,
    resources: Resources | None,
    project: str,
    label: str,
    quotas: Mapping[str, Limit] | None = None,
    copies: int = 1,
) -> Seat | None:
    """``resources`` (``copies`` times: a served model's replicas, which share them) taken in
    ``ledger`` under ``key`` for this process's life (None: it asks for nothing). Conflict when the
    machine (or the project's quota) has no room now; UsageError when it never could."""
    need = need_of([(resources, 1)] * copies) if resources is not None else None
    if need is None or need.empty:
        return None
    capacity = _capacity(need)
    try:
        grant, _ = ledger.admit(
            key,
            need,
            capacity,
            name=label,
            wait=False,
            project=project,
            limits=quotas,
            asker=f"the {label}",
            advice="a service does not queue: stop one of these, or ask for less",
        )
    except NoRoom as busy:
        raise Conflict(f"no room for the {label} now: {busy}") from None
    except NeverFits as never:
        said = str(never).replace("the experiment needs", "it needs")
        raise UsageError(f"the {label} can never start here: {said}") from None
    assert grant is not None  # wait=False: admitted, or NoRoom raised
    return Seat(key, grant, _cgroup(ledger, key, grant))


def check_fits(resources: Resources | None, project: str, label: str, quotas: Mapping[str, Limit]) -> None:
    """UsageError now when ``resources`` could never be held here (more than the machine, or the
    project's quota, has): what a long build before ``take_seat`` would otherwise end with."""
    need = need_of([(resources, 1)]) if resources is not None else None
    if need is None or need.empty:
        return
    never = never_fits(need, _capacity(need)) or share.never_within(project, need, quotas.get(project))
    if never:
        raise UsageError(
            f"the {label} can never start here: {never.replace('the experiment needs', 'it needs')}"
        )


def _capacity(need: Need) -> Capacity:
    """What this machine offers: the cores this process may run on, its memory, its GPUs (asked
    only when some are needed)."""
    return Capacity(
        cpus=tuple(sorted(os.sched_getaffinity(0))),
        gpus=limits.detect_gpus() if need.gpus else (),
        memory_mib=limits.machine().memory_mib,
    )


def _cgroup(ledger: Ledger, key: str, grant: Grant) -> cgroups.Cgroup | None:
    """Its memory cap, and its CPU time held to its cores' worth (a process may widen its own
    affinity, never leave its cgroup); None where none can be written here. The empty ones that
    killed holders left are removed first."""
    if not (grant.memory_mib or grant.cpus):
        return None
    sweep_cgroups(ledger)
    memory = math.ceil(grant.memory_mib * MIB) if grant.memory_mib else None
    with contextlib.suppress(OSError):
        return cgroups.Cgroup.create(
            cgroup_name(ledger, key), memory_bytes=memory, cpus=len(grant.cpus) or None, pids_max=None
        )
    return None


def cgroup_name(ledger: Ledger, key: str) -> str:
    """The cgroup of the seat ``key`` of ``ledger``: its key, and its ledger's tag (every Phalanx
    process of this machine makes its cgroups in one folder, whichever ledger it uses)."""
    return f"{key}@{_tag(ledger)}"


def sweep_cgroups(ledger: Ledger) -> None:
    """Remove the empty cgroups that killed holders of ``ledger``'s seats left: those of its keys
    that it no longer holds. A seat's key is held before its cgroup is made and until it is
    removed, and the sweep holds the ledger's lock from its look at the keys to its last rmdir
    (a look, then rmdirs after it, would remove the cgroup of a seat another process took and
    made meanwhile); so a seat being started, here or by another process, is never swept; and
    another ledger's are never looked at."""
    tag = f"@{_tag(ledger)}"
    with contextlib.suppress(OSError), ledger.locked() as state:
        reclaim(state)
        held = set(state.entries)

        def left(name: str) -> bool:
            key = name.removesuffix(tag)
            return name.endswith(tag) and key.startswith(SERVICE_PREFIXES) and key not in held

        cgroups.remove_empty(left)


def _tag(ledger: Ledger) -> str:
    return hashlib.sha256(str(ledger.path.resolve()).encode()).hexdigest()[:8]


def give_back(ledger: Ledger, seat: Seat | None) -> None:
    """Its processes ended (what is left in its cgroup killed), its cgroup removed, its cores,
    GPUs and memory back in the ledger (the queue's waiters woken)."""
    if seat is None:
        return
    if seat.cgroup is not None:
        seat.cgroup.kill()
        seat.cgroup.remove()
    ledger.release(seat.key)


def resources_json(resources: Resources | None) -> dict[str, Any] | None:
    """``resources`` as a served model's record keeps them (for the next server)."""
    return resources.to_json() if resources is not None else None


def resources_of(doc: Any) -> Resources | None:
    """What ``resources_json`` wrote, back (None for nothing, or a record of before resources)."""
    if not isinstance(doc, Mapping):
        return None

    def part(name: str) -> Range:
        found = doc.get(name)
        pair = found if isinstance(found, Mapping) else {}
        return Range(_number(pair.get("requests")), _number(pair.get("limits")))

    return Resources(part("cpu"), part("memory"), part("gpu"))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
