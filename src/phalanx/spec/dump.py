"""ExperimentSpec -> the canonical experiment file (new layout), which loads back to an equal spec.

The estimators use it to show and store what they launch exactly as a file-based experiment is
shown and stored; `phalanx check` users can use it to migrate an old-layout file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from phalanx.domain import Range, Resources
from phalanx.spec.model import Build, ExperimentSpec, ReplicaTemplate, Topology


def spec_to_dict(spec: ExperimentSpec) -> dict[str, Any]:
    """The file as plain data (keys in the order the documentation lists them)."""
    doc: dict[str, Any] = {"version": spec.version, "kind": spec.kind}
    for key in ("name", "project", "description"):
        if getattr(spec, key) is not None:
            doc[key] = getattr(spec, key)
    if spec.framework is not None:
        doc["framework"] = spec.framework.value
    if spec.backend is not None:
        doc["backend"] = spec.backend.value
    if spec.tags:
        doc["tags"] = list(spec.tags)
    if spec.params:
        doc["params"] = {str(k): _data(v) for k, v in spec.params.items()}
    environment = _template(spec.master)
    if spec.topology != Topology():
        environment["replicas"] = _topology(spec.topology)
    if environment:
        doc["environment"] = environment
    build = _build(spec.build)
    if build:
        doc["build"] = build
    run: dict[str, Any] = {"cmd": spec.command[0] if len(spec.command) == 1 else list(spec.command)}
    if spec.max_restarts:
        run["max_restarts"] = spec.max_restarts
    if spec.max_run_seconds is not None:
        run["max_run_seconds"] = _num(spec.max_run_seconds)
    if spec.stall.notice is not None:
        run["stall_notice"] = _num(spec.stall.notice)
    if spec.stall.fail is not None:
        run["hang_timeout"] = _num(spec.stall.fail)
    if spec.checkpoints:
        run["checkpoints"] = dict(spec.checkpoints)
    if spec.inputs:  # the data it reads (phalanx.data): before run, as a user writes it
        doc["inputs"] = [i.to_json() for i in spec.inputs]
    doc["run"] = run
    if spec.env:
        doc["env"] = dict(spec.env)
    return doc


# Characters YAML reads as line breaks inside a quoted scalar (and so folds into a space): a string
# holding one is written double-quoted, where PyYAML escapes them (\N, \L, \P).
_LINE_BREAKS = frozenset("\x85\u2028\u2029")


class _Dumper(yaml.SafeDumper):
    pass


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if _LINE_BREAKS.intersection(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def spec_to_yaml(spec: ExperimentSpec) -> str:
    # width: never fold long commands over lines (a folded `\\` would read as a continuation)
    return yaml.dump(spec_to_dict(spec), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=2**30)


def _num(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


def _range(r: Range) -> dict[str, Any]:
    return {k: _num(v) for k, v in (("requests", r.requests), ("limits", r.limits)) if v is not None}


def _resources(res: Resources) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("cpu", "memory", "gpu"):
        r: Range = getattr(res, name)
        if r != Range():
            out[name] = _range(r)
    return out


def _template(t: ReplicaTemplate | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t is None:
        return out
    if t.resources is not None:
        out["resources"] = _resources(t.resources)
    if t.node_selector is not None:
        out["node_selector"] = dict(t.node_selector)
    if t.affinity is not None:
        out["affinity"] = _data(t.affinity)
    if t.tolerations is not None:
        out["tolerations"] = [_data(x) for x in t.tolerations]
    return out


def _topology(topo: Topology) -> dict[str, Any]:
    out: dict[str, Any] = {"n_workers": topo.n_workers}
    if topo.n_ps:
        out["n_ps"] = topo.n_ps
    if topo.processes_per_replica != 1:
        out["processes_per_replica"] = topo.processes_per_replica
    for role, default, indexed in (
        ("worker", topo.default_worker, topo.worker),
        ("ps", topo.default_ps, topo.ps),
    ):
        if default is not None:
            out[f"default_{role}"] = _template(default)
        if indexed:
            out[role] = [{"index": i, **_template(t)} for i, t in sorted(indexed.items())]
    return out


def _build(b: Build) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("image", "dockerfile", "requirements"):
        if getattr(b, key) is not None:
            out[key] = getattr(b, key)
    for key in ("build_steps", "pip_packages"):
        if getattr(b, key):
            out[key] = list(getattr(b, key))
    if b.env_vars:
        out["env_vars"] = dict(b.env_vars)
    return out


def _data(value: Any) -> Any:
    """Plain YAML data: mappings, lists and scalars; anything else is written as its text."""
    if isinstance(value, Mapping):
        return {str(k): _data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_data(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
