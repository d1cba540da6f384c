"""The typed dry runs of the local and Slurm engines (Kubernetes' is ``kube_objects.KubeDryRun``).

Each is a frozen dataclass holding the engine's request field by field, so ``submit`` and the CLI
read attributes instead of keys of an untyped dict; ``native`` gives the same request in the
engine's own JSON-able terms and ``render()`` prints it as that engine's users read it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from phalanx.backends.base import DryRun


@dataclass(frozen=True)
class LocalProcess:
    """One process of a unit: its argv and what it adds to the inherited environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "env": dict(self.env)}


@dataclass(frozen=True)
class LocalUnit:
    """One process group the local engine starts under its reaper: a replica, or the mpirun launcher
    that covers several replicas (``replicas``). Its console goes to ``log``."""

    name: str
    replicas: tuple[str, ...]
    log: str
    limits: Mapping[str, Any]  # limits.ReplicaLimits.to_json(): cpus, memory, threads...
    cwd: str
    processes: tuple[LocalProcess, ...]
    # a server-run unit's box: the argv its processes' own argv follows (bwrap ... setpriv ... --);
    # their environment is then exactly ``env``, nothing inherited (phalanx.machine.box)
    box: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc = {
            "name": self.name,
            "replicas": list(self.replicas),
            "log": self.log,
            "limits": dict(self.limits),
            "cwd": self.cwd,
            "processes": [p.to_json() for p in self.processes],
        }
        if self.box:
            doc["box"] = list(self.box)
        return doc

    def title(self) -> str:
        if self.replicas == (self.name,):
            return self.name
        return f"{self.name} (launcher for {', '.join(self.replicas)})"


@dataclass(frozen=True)
class LocalDryRun(DryRun):
    """The local engine's request: process units, each argv, working directory and environment."""

    units: tuple[LocalUnit, ...]
    # the loopback ports Phalanx probed for the replicas' rendezvous (phalanx.machine.ports): a
    # failure that names one as in use lost it to another process, and the group starts again
    ports: tuple[int, ...] = ()
    format: ClassVar[str] = "json"

    @property
    def native(self) -> dict[str, Any]:
        return {
            "engine": "local",
            "experiment_id": self.context.experiment_id,
            "units": [u.to_json() for u in self.units],
        }

    def text(self) -> str:
        """What `phalanx run --dry-run` prints for it: per unit, its cwd, log, limits, env, argv."""
        out: list[str] = []
        for unit in self.units:
            out.append(f"# {unit.title()}")
            out.append(f"cwd: {unit.cwd}")
            out.append(f"log: {unit.log}")
            limits = {k: v for k, v in unit.limits.items() if v is not None}
            if limits:
                provisional = limits.get("cpus") and self.context.cpu_pool is None
                # a dry run is not admitted: the ledger hands out the cores free at the real start
                out.append(f"limits: {limits}" + ("  (cores as on an idle machine)" if provisional else ""))
            if unit.box:
                out.append("box: " + " ".join(shlex.quote(a) for a in unit.box))
            for i, proc in enumerate(unit.processes):
                if len(unit.processes) > 1:
                    out.append(f"process {i}:")
                out.append(
                    "env (its whole environment, plus the locale and the project's secrets):"
                    if unit.box
                    else "env (added to the inherited environment):"
                )
                out.extend(f"  {k}={shlex.quote(v)}" for k, v in sorted(proc.env.items()))
                out.append("argv: " + " ".join(shlex.quote(a) for a in proc.argv))
            out.append("")
        return "\n".join(out)


@dataclass(frozen=True)
class SlurmDryRun(DryRun):
    """The Slurm engine's request: one sbatch script (a heterogeneous job when replicas differ)."""

    script: str
    format: ClassVar[str] = "sbatch"

    @property
    def native(self) -> str:
        return self.script

    def render(self) -> str:
        return self.script
