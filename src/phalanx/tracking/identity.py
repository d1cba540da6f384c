"""Who is reporting: the experiment, replica and rank of this process, read from the environment
the launcher (or a main Task.init) sets. Standard library only."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_EXPERIMENT = "PHALANX_EXPERIMENT_ID"
ENV_REPLICA = "PHALANX_REPLICA"
ENV_ROLE = "PHALANX_ROLE"
ENV_INDEX = "PHALANX_INDEX"
ENV_RANK = "PHALANX_RANK"
ENV_HOME = "PHALANX_HOME"
ENV_SPOOL = "PHALANX_SPOOL"
ENV_HOST = "PHALANX_HOST"
ENV_TOKEN = "PHALANX_TOKEN"
ENV_CAPTURED = "PHALANX_CAPTURED"
ENV_ATTEMPT = "PHALANX_ATTEMPT"  # the attempt (0, 1, ...) this process belongs to; unset: not known
ENV_INGESTER_PID = "PHALANX_INGESTER_PID"  # a process running an Ingester over PHALANX_SPOOL
ENV_PARAMS = "PHALANX_PARAMS"  # the experiment's params as JSON (declarations, --param, a trial's sample)


def launch_params() -> dict[str, Any]:
    """The params this experiment was launched with (PHALANX_PARAMS), {} outside Phalanx or if unreadable.

    A group trial's sampled values arrive here even when run.cmd never names them (Polyaxon's
    ``get_declarations()``, ClearML's overridden ``connect()``)."""
    raw = os.environ.get(ENV_PARAMS)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def home() -> Path:
    value = os.environ.get(ENV_HOME)
    return Path(value).expanduser() if value else Path.home() / ".phalanx"


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    return int(value) if value.lstrip("-").isdigit() else None


@dataclass(frozen=True)
class Identity:
    experiment_id: str
    replica: str
    role: str
    index: int
    replica_rank: int | None  # PHALANX_RANK: the replica's rank
    spool_dir: Path
    host: str | None
    token: str | None
    attempt: int | None = None  # PHALANX_ATTEMPT: which start of the experiment this process is

    @classmethod
    def from_env(cls) -> Identity | None:
        """None when no experiment is named in the environment."""
        env = os.environ
        exp = env.get(ENV_EXPERIMENT, "").strip()
        if not exp:
            return None
        spool = env.get(ENV_SPOOL) or str(home() / "spool" / exp)
        return cls(
            experiment_id=exp,
            replica=env.get(ENV_REPLICA) or "master",
            role=env.get(ENV_ROLE) or "master",
            index=_int(env.get(ENV_INDEX)) or 0,
            replica_rank=_int(env.get(ENV_RANK)),
            spool_dir=Path(spool),
            host=(env.get(ENV_HOST) or "").rstrip("/") or None,
            token=env.get(ENV_TOKEN) or None,
            attempt=_int(env.get(ENV_ATTEMPT)),
        )

    def rank(self) -> int | None:
        """This process's rank: RANK (as torchrun and our launcher set it), else the rank of an
        initialised torch.distributed group (processes spawned by torch.multiprocessing), else the
        replica's rank. torch is only looked at if the program imported it already."""
        return rank_probe(self.replica_rank)()


_ENV_BYTES: Any = getattr(os.environ, "_data", None)  # CPython keeps the encoded environment here


def rank_probe(fallback: int | None) -> Callable[[], int | None]:
    """``Identity.rank()`` fast enough for every report call (about 0.15 µs): the rank must be
    read when a call is made, not when the background thread writes it, because by then a spawned
    rank may have left its process group (``destroy_process_group``) and would be taken for
    rank 0. What was parsed last is cached by the identity of the raw value it came from."""
    env: Any = _ENV_BYTES if isinstance(_ENV_BYTES, dict) else None
    modules = sys.modules
    cache: list[Any] = [None, None, None, None]  # raw RANK, its int, the world group, its rank

    def probe() -> int | None:
        raw = env.get(b"RANK") if env is not None else os.environ.get("RANK")
        if raw is not None:
            if raw is not cache[0]:
                text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
                cache[0], cache[1] = raw, _int(text)
            if cache[1] is not None:
                return cache[1]  # type: ignore[no-any-return]  # an int; no cast() on this hot path
        dist = modules.get("torch.distributed")
        if dist is not None:
            try:
                world = dist.GroupMember.WORLD
                if world is not None:
                    if world is not cache[2]:
                        cache[2], cache[3] = world, int(dist.get_rank())
                    return cache[3]  # type: ignore[no-any-return]  # an int, as above
            except Exception:  # torch half torn down at exit, or built without distributed
                pass
        return fallback

    return probe
