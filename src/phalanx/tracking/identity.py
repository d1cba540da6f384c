"""Who is reporting: the experiment, replica and rank of this process, read from the environment
the launcher (or a main Task.init) sets. Standard library only."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

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
ENV_INGESTER_PID = "PHALANX_INGESTER_PID"  # a process running an Ingester over PHALANX_SPOOL


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
        )

    def rank(self) -> int | None:
        """This process's rank: RANK (as torchrun and our launcher set it), else the rank of an
        initialised torch.distributed group (processes spawned by torch.multiprocessing), else the
        replica's rank. torch is only looked at if the program imported it already."""
        env_rank = _int(os.environ.get("RANK"))
        if env_rank is not None:
            return env_rank
        dist = sys.modules.get("torch.distributed")
        if dist is not None:
            try:
                if dist.is_available() and dist.is_initialized():
                    return int(dist.get_rank())
            except Exception:  # torch half torn down at exit
                pass
        return self.replica_rank
