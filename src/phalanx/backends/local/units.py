"""A local attempt's units once started: what its state.json records of each, and how one ended,
in words (the local engine's; Ray's actors end in the same words)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import NamedTuple

from phalanx.domain import ReplicaState
from phalanx.machine.procs import start_time


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def exit_reason(code: int) -> str:
    """How a replica ended, in words; a shell reports a command killed by signal N as 128 + N."""
    if code < 0:
        return f"was killed by {signal_name(-code)}"
    if 128 < code < 128 + 65:
        return f"exited with code {code} (its command was killed by {signal_name(code - 128)})"
    return f"exited with code {code}"


@dataclass
class StartedUnit:
    """A unit the engine started, as the attempt's state.json records it."""

    name: str
    replicas: list[str]
    pid: int
    start: str  # /proc start time, to tell our pid from a reused one
    status: str
    log: str
    offset: int
    ranks_per_replica: int = 1  # an mpirun unit: its tagged lines go to replica rank // this
    tagged: bool = False  # an mpirun unit: its log is mpirun's --tag-output stream
    started_at: float = 0.0  # wall clock when its leader was started (0: not recorded)
    cgroup: list[str] = field(default_factory=list)  # a boxed unit's cgroup folders
    cgroup_v2: bool = False
    ports: list[int] = field(default_factory=list)  # the rendezvous ports probed for its attempt


class Ended(NamedTuple):
    """A unit's state as its reaper's status file (or its absence) tells it."""

    state: ReplicaState
    code: int | None
    reason: str | None
    finished: float
    port_lost: bool = False  # it failed binding a rendezvous port probed for it (ReplicaStatus's)


def proc_start(pid: int) -> str | None:
    """``procs.start_time`` as the string state.json keeps (None: gone, or a zombie)."""
    ticks = start_time(pid)
    return None if ticks is None else str(ticks)
