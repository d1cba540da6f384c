"""ExperimentSpec: the validated, layout-independent model of one experiment.

Both doors lead here: the experiment file (either topology layout) through ``spec.loader``, and the
Python estimators through ``phalanx.estimators``. Everything downstream (plan, backends, store) reads
only this model, never the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.domain import BackendKind, Framework, Resources
from phalanx.spec.inputs import InputSpec


@dataclass(frozen=True)
class Placement:
    """Where a replica may run (Kubernetes scheduling keys, passed through to engines that know them)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class ReplicaTemplate:
    """Resources and placement for one replica, or the default for a role.

    A field left as None means "not given here": an index override replaces the role default per
    attribute (resources as a whole, node_selector as a whole, ...), as Polyaxon did.
    """

    resources: Resources | None = None
    node_selector: Mapping[str, str] | None = None
    affinity: Mapping[str, Any] | None = None
    tolerations: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class Topology:
    """master + n_workers workers + n_ps parameter servers; the master is implicit and always there."""

    n_workers: int = 0
    n_ps: int = 0
    default_worker: ReplicaTemplate | None = None
    worker: Mapping[int, ReplicaTemplate] = field(default_factory=dict)
    default_ps: ReplicaTemplate | None = None
    ps: Mapping[int, ReplicaTemplate] = field(default_factory=dict)
    processes_per_replica: int = 1  # torchrun's --nproc_per_node: processes each replica starts


@dataclass(frozen=True)
class Stall:
    """run.stall_notice / run.hang_timeout: seconds without progress (no step reported, no console
    output, no CPU time) after which a stalled replica is named (notice) and the experiment fails
    (fail); 0 turns one off, None leaves it to PHALANX_STALL_NOTICE / PHALANX_HANG_TIMEOUT and their
    defaults (supervisor.liveness)."""

    notice: float | None = None
    fail: float | None = None


REQUIREMENTS_MAX_BYTES = 1 << 20  # the largest build.requirements file read (root reads it on a server)


@dataclass(frozen=True)
class Build:
    """A per-experiment Python environment (cached venv) and engine image hints."""

    image: str | None = None
    pip_packages: tuple[str, ...] = ()
    requirements: str | None = None  # path, relative to the experiment file's directory
    build_steps: tuple[str, ...] = ()
    env_vars: Mapping[str, str] = field(default_factory=dict)
    dockerfile: str | None = None  # path of a Dockerfile (engines that build images), relative to the file


@dataclass(frozen=True)
class ExperimentSpec:
    version: int
    kind: str
    command: tuple[str, ...]  # run.cmd: one shell command per item, run in sequence
    framework: Framework | None = None
    backend: BackendKind | None = None
    name: str | None = None
    project: str | None = None
    description: str | None = None
    tags: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    master: ReplicaTemplate = field(default_factory=ReplicaTemplate)  # environment.resources & co.
    topology: Topology = field(default_factory=Topology)
    build: Build = field(default_factory=Build)
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment for every replica
    max_restarts: int = 0
    max_run_seconds: float | None = None
    stall: Stall = field(default_factory=Stall)  # run.stall_notice, run.hang_timeout
    checkpoints: Mapping[str, Any] | None = None  # run.checkpoints: the retention policy
    inputs: tuple[InputSpec, ...] = ()  # the data it reads (phalanx.spec.inputs)
    source_file: str | None = None  # path of the file it came from, when it came from one
    launch_params: Mapping[str, Any] = field(default_factory=dict)  # the `--param` values given at launch
    source_text: str | None = None  # the file's text, shown in the UI's Overview
    # Keys the loader accepted for Polyaxon compatibility but that change nothing here (e.g. `logging`),
    # as "FILE:LINE:COL: path: why" lines; `phalanx check` shows them. Not part of the spec's identity.
    notes: tuple[str, ...] = field(default=(), compare=False)
