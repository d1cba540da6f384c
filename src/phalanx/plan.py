"""ExperimentSpec -> Plan: the expanded list of replicas every backend consumes (pure).

Ranks follow Polyaxon and torchrun: the master is rank 0 and worker i is rank i + 1; parameter
servers take no rank. Per-index overrides replace the role default attribute by attribute.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.domain import BackendKind, Framework, Resources, Role
from phalanx.errors import SpecError
from phalanx.machine import limits
from phalanx.spec.inputs import shell_ref
from phalanx.spec.launchers import wire
from phalanx.spec.model import Build, ExperimentSpec, ReplicaTemplate
from phalanx.spec.shellwords import quote_state, stands_alone


@dataclass(frozen=True)
class ReplicaPlan:
    name: str  # "master", "worker-0", "ps-0"
    role: Role
    index: int
    rank: int | None
    resources: Resources
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    processes: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": str(self.role),
            "index": self.index,
            "rank": self.rank,
            "processes": self.processes,
            "resources": self.resources.to_json(),
            "node_selector": dict(self.node_selector),
            "affinity": self.affinity,
            "tolerations": [dict(t) for t in self.tolerations],
        }


@dataclass(frozen=True)
class Plan:
    """Everything a backend needs to start an experiment, and nothing it must re-read from the file."""

    name: str
    project: str
    framework: Framework | None
    backend: BackendKind | None
    replicas: tuple[ReplicaPlan, ...]
    command: str  # the shell command every replica runs, params already filled in
    params: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    build: Build = field(default_factory=Build)
    env: Mapping[str, str] = field(default_factory=dict)
    max_restarts: int = 0
    max_run_seconds: float | None = None
    source_text: str | None = None
    checkpoints: Mapping[str, Any] | None = None  # the retention policy (phalanx.checkpoints)
    source_file: str | None = None  # the experiment file's path, when it came from one
    launch_params: Mapping[str, Any] = field(default_factory=dict)  # what `--param` gave at launch
    # the data it reads: InputSpecs as written, replaced by their lineage records once resolved
    inputs: tuple[Any, ...] = ()
    notes: tuple[str, ...] = ()  # what building the plan did to the command (`phalanx check` says it)

    @property
    def world_size(self) -> int:
        """Processes taking part in the collective (master + workers, times processes per replica)."""
        return sum(r.processes for r in self.replicas if r.role is not Role.PS)

    def replica(self, name: str) -> ReplicaPlan:
        for r in self.replicas:
            if r.name == name:
                return r
        raise KeyError(name)

    def topology(self) -> dict[str, int]:
        counts = {"master": 0, "worker": 0, "ps": 0}
        for r in self.replicas:
            counts[str(r.role)] += 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "project": self.project,
            "framework": str(self.framework) if self.framework else None,
            "backend": str(self.backend) if self.backend else None,
            "replicas": [r.to_json() for r in self.replicas],
            "command": self.command,
            "params": dict(self.params),
            "tags": list(self.tags),
            "max_restarts": self.max_restarts,
            **({"checkpoints": dict(self.checkpoints)} if self.checkpoints else {}),
            **({"inputs": [_input_json(i) for i in self.inputs]} if self.inputs else {}),
        }


def _input_json(item: Any) -> dict[str, Any]:
    return dict(item) if isinstance(item, Mapping) else dict(item.to_json())


_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\|\s*raw\s*)?\}\}")
# {{ inputs.NAME }}: the replica's local path of input NAME, through its environment variable
_INPUT_PLACEHOLDER = re.compile(r"\{\{\s*inputs\.([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")


def render_command(commands: tuple[str, ...], params: Mapping[str, Any]) -> str:
    """Fill `{{ name }}` from params and join several commands with `&&` (they run in sequence).

    A value becomes exactly one shell word, whatever it holds (`it's`, `a;echo X`, spaces): it is
    quoted for where the placeholder stands (bare, inside "..." or inside '...'), as the estimators
    quote their arguments. A list or mapping is inserted as its JSON text. `{{ name | raw }}`
    inserts the value as written, for a value that is meant to be shell syntax (Polyaxon's way).

    The loader refuses unknown names in files; a spec built in Python (the estimators) can still
    name one, so it is answered with a SpecError too.
    """
    missing = sorted({n for c in commands for n in placeholders(c) if n not in params})
    if missing:
        names = ", ".join(f"{{{{ {n} }}}}" for n in missing)
        raise SpecError(f"run.cmd: unknown placeholder {names}; give a value with --param NAME=VALUE")
    return " && ".join(_fill(c, params) for c in commands)


def param_text(value: Any) -> str:
    """A param's value as the text a command receives."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, separators=(", ", ": "), default=str)
    return str(value)


def render_inputs(command: str, names: set[str]) -> str:
    """``{{ inputs.NAME }}`` -> ``"${PHALANX_INPUT_NAME}"`` (quoted for where it stands); SpecError
    for a name that is not one of the experiment's inputs."""
    unknown = sorted({m.group(1) for m in _INPUT_PLACEHOLDER.finditer(command)} - names)
    if unknown:
        listed = ", ".join(sorted(names)) or "none"
        raise SpecError(f"run.cmd: {{{{ inputs.{unknown[0]} }}}} names no input (inputs: {listed})")
    out: list[str] = []
    done = 0
    for match in _INPUT_PLACEHOLDER.finditer(command):
        out.append(command[done : match.start()])
        ref = shell_ref(match.group(1))
        state = quote_state(command, match.start())
        out.append(ref if state == '"' else f"'\"{ref}\"'" if state == "'" else f'"{ref}"')
        done = match.end()
    out.append(command[done:])
    return "".join(out)


def _fill(command: str, params: Mapping[str, Any]) -> str:
    out: list[str] = []
    done = 0
    for match in _PLACEHOLDER.finditer(command):
        out.append(command[done : match.start()])
        text = param_text(params[match.group(1)])
        if match.group(2):
            out.append(text)
        elif not text and stands_alone(command, match.start(), match.end()):
            pass  # an empty optional param adds no argument (see stands_alone)
        else:
            out.append(_quoted(text, quote_state(command, match.start())))
        done = match.end()
    out.append(command[done:])
    return "".join(out)


def _quoted(text: str, state: str) -> str:
    if state == "'":  # close, an escaped quote, reopen
        return text.replace("'", "'\\''")
    if state == '"':
        return "".join("\\" + ch if ch in '\\"$`' else ch for ch in text)
    return shlex.quote(text)


def placeholders(text: str) -> list[str]:
    return [m.group(1) for m in _PLACEHOLDER.finditer(text)]


def _merge(default: ReplicaTemplate | None, override: ReplicaTemplate | None) -> ReplicaTemplate:
    d = default or ReplicaTemplate()
    o = override or ReplicaTemplate()
    return ReplicaTemplate(
        resources=o.resources if o.resources is not None else d.resources,
        node_selector=o.node_selector if o.node_selector is not None else d.node_selector,
        affinity=o.affinity if o.affinity is not None else d.affinity,
        tolerations=o.tolerations if o.tolerations is not None else d.tolerations,
    )


def _replica(
    name: str, role: Role, index: int, rank: int | None, t: ReplicaTemplate, procs: int
) -> ReplicaPlan:
    return ReplicaPlan(
        name=name,
        role=role,
        index=index,
        rank=rank,
        resources=t.resources or Resources(),
        node_selector=dict(t.node_selector or {}),
        affinity=t.affinity,
        tolerations=tuple(t.tolerations or ()),
        processes=procs,
    )


def build_plan(
    spec: ExperimentSpec, params: Mapping[str, Any] | None = None, name: str | None = None
) -> Plan:
    """Expand a spec into its replicas. ``params`` override the spec's params (``--param k=v``)."""
    merged = {**spec.params, **(params or {})}
    topo = spec.topology
    too_many = limits.replicas_over_limit(1 + topo.n_workers + topo.n_ps)
    if too_many is not None:  # a spec built in Python (the estimators) has not met the file's check
        raise SpecError(f"environment.replicas: {too_many}")
    procs = topo.processes_per_replica
    replicas = [_replica("master", Role.MASTER, 0, 0, spec.master, procs)]
    for i in range(topo.n_workers):
        t = _merge(topo.default_worker, topo.worker.get(i))
        replicas.append(_replica(f"worker-{i}", Role.WORKER, i, i + 1, t, procs))
    for i in range(topo.n_ps):
        t = _merge(topo.default_ps, topo.ps.get(i))
        replicas.append(_replica(f"ps-{i}", Role.PS, i, None, t, 1))
    command = render_inputs(render_command(spec.command, merged), {i.name for i in spec.inputs})
    notes: tuple[str, ...] = ()
    if (
        spec.framework is Framework.PYTORCH
    ):  # torchrun / accelerate launch in run.cmd: the replica's rendezvous
        wiring = wire(command, nodes=1 + topo.n_workers, processes_per_replica=procs)
        command, notes = wiring.command, (wiring.note,) if wiring.note else ()
    return Plan(
        name=name or spec.name or "experiment",
        project=spec.project or "default",
        framework=spec.framework,
        backend=spec.backend,
        replicas=tuple(replicas),
        command=command,
        params=merged,
        tags=spec.tags,
        build=spec.build,
        env=dict(spec.env),
        max_restarts=spec.max_restarts,
        max_run_seconds=spec.max_run_seconds,
        source_text=spec.source_text,
        checkpoints=spec.checkpoints,
        source_file=spec.source_file,
        launch_params={**spec.launch_params, **(params or {})},
        inputs=tuple(spec.inputs),
        notes=notes,
    )


def command_argv(command: str) -> list[str]:
    """The argv a POSIX backend runs for a plan's command (a shell, so `&&` and env expansion work)."""
    return ["/bin/sh", "-c", command]


def quote(command: str) -> str:
    return shlex.quote(command)
