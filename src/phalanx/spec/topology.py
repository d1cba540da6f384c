"""The `environment` section: the master's resources and placement, and the replica topology.

Both layouts end in the same Topology: `environment.replicas` (with `framework:` at the top, Polyaxon
>= 0.4.2) and the older `environment.tensorflow|mxnet|pytorch|horovod` subsection, which also names
the framework. Either may use the variant keys `default_worker_resources` / `worker_resources` (and
the ps ones) that Polyaxon's documentation shows next to `default_worker.resources`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.domain import Framework, Range, Resources
from phalanx.errors import UsageError
from phalanx.machine import limits
from phalanx.spec.errors import Collector, describe, join
from phalanx.spec.model import ReplicaTemplate, Topology
from phalanx.spec.quantities import parse_cpu, parse_gpu, parse_memory
from phalanx.spec.yamltree import Mark, YKey, YMap, YNode, YScalar, YSeq, is_null, plain

FRAMEWORK_SECTIONS = tuple(f.value for f in Framework)
TEMPLATE_KEYS = ("resources", "node_selector", "affinity", "tolerations")
TOPOLOGY_KEYS = (
    "n_workers",
    "n_ps",
    "processes_per_replica",
    "default_worker",
    "worker",
    "default_ps",
    "ps",
    "default_worker_resources",
    "worker_resources",
    "default_ps_resources",
    "ps_resources",
)
TOPOLOGY_SHAPES: dict[str, type] = {
    **dict.fromkeys(("n_workers", "n_ps", "processes_per_replica"), YScalar),
    **dict.fromkeys(("worker", "ps", "worker_resources", "ps_resources"), YSeq),
    **dict.fromkeys(
        ("default_worker", "default_ps", "default_worker_resources", "default_ps_resources"), YMap
    ),
}
ENVIRONMENT_KEYS = ("resources", "node_selector", "affinity", "tolerations", "replicas", *FRAMEWORK_SECTIONS)
ENVIRONMENT_IGNORED = {
    name: f"accepted for Polyaxon compatibility and ignored: {why}"
    for name, why in {
        "persistence": "Phalanx replicas read data from paths or URLs the command names",
        "secret_refs": "Kubernetes secrets are not mounted by Phalanx",
        "configmap_refs": "Kubernetes config maps are not mounted by Phalanx",
        "data_refs": "Phalanx replicas read data from paths or URLs the command names",
        "outputs_refs": "outputs go to Phalanx's artifact store",
    }.items()
}
RESOURCE_KEYS = ("cpu", "memory", "gpu")
RANGE_KEYS = ("requests", "limits")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
AFFINITY_KEYS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
_PARSERS: dict[str, Callable[[object], float]] = {"cpu": parse_cpu, "memory": parse_memory, "gpu": parse_gpu}
_UNITS = {"cpu": "", "memory": " MiB", "gpu": ""}
_EXPECTED = {
    "cpu": "a number of cores or milli-cores like '500m'",
    "memory": "MiB as a number or a quantity like '512Mi'",
    "gpu": "a whole number of GPUs",
}


@dataclass
class IndexEntry:
    index: int
    mark: Mark
    path: str
    template: ReplicaTemplate
    sources: set[str] = field(default_factory=set)  # "worker" and/or "worker_resources"


@dataclass
class TopologyDraft:
    """What one topology section says, before the cross-checks that need the framework."""

    path: str
    key: YKey  # `replicas:` or `tensorflow:`, where problems about the whole section point
    counts: dict[str, tuple[int, YKey]] = field(default_factory=dict)  # n_workers/n_ps/processes...
    defaults: dict[str, ReplicaTemplate] = field(default_factory=dict)  # "worker"/"ps"
    entries: dict[str, list[IndexEntry]] = field(default_factory=dict)
    ps_keys: list[YKey] = field(default_factory=list)  # every key that asks for parameter servers
    refused: set[str] = field(default_factory=set)  # counts already said to be wrong ("n_workers")


@dataclass
class EnvironmentDraft:
    master: ReplicaTemplate = field(default_factory=ReplicaTemplate)
    topology: TopologyDraft | None = None
    section_framework: tuple[Framework, YKey] | None = None  # from `environment.<framework>`


def read_environment(c: Collector, node: YNode, path: str = "environment") -> EnvironmentDraft:
    draft = EnvironmentDraft()
    env = c.mapping(node, path, ENVIRONMENT_KEYS, ignored=ENVIRONMENT_IGNORED)
    if env is None:
        return draft
    draft.master = read_template(c, env, path)
    for key, value in env.items:
        if key.name != "replicas" and key.name not in FRAMEWORK_SECTIONS:
            continue
        if is_null(value) and key.name == "replicas":
            continue  # `replicas:` with nothing under it (`tensorflow:` alone still names the framework)
        sub = join(path, key.name)
        if draft.topology is not None:
            first = draft.topology.key
            c.add(
                key, sub, f"the topology is already given by {first.name} (line {first.mark.line}); keep one"
            )
            continue
        if key.name in FRAMEWORK_SECTIONS:
            draft.section_framework = (Framework(key.name), key)
        draft.topology = TopologyDraft(sub, key) if is_null(value) else read_topology(c, value, sub, key)
    return draft


def read_topology(c: Collector, node: YNode, path: str, section: YKey) -> TopologyDraft:
    draft = TopologyDraft(path=path, key=section)
    m = c.mapping(node, path, TOPOLOGY_KEYS, shapes=TOPOLOGY_SHAPES)
    if m is None:
        return draft
    for key, value in m.items:
        sub = join(path, key.name)
        if is_null(value):
            continue
        if key.name != "n_ps" and key.name.startswith(("ps", "default_ps")):
            draft.ps_keys.append(key)
        if key.name in ("n_workers", "n_ps"):
            n = c.integer(value, sub, what="a whole number of replicas")
            if n is None:
                draft.refused.add(key.name)
            else:
                draft.counts[key.name] = (n, key)
                if key.name == "n_ps" and n > 0:
                    draft.ps_keys.append(key)
        elif key.name == "processes_per_replica":
            n = c.integer(value, sub, minimum=1, what="a whole number of processes")
            if n is not None:
                draft.counts[key.name] = (n, key)
        elif key.name in ("default_worker", "default_ps"):
            t = c.mapping(value, sub, TEMPLATE_KEYS)
            if t is not None:
                _set_default(c, draft, key.name.removeprefix("default_"), read_template(c, t, sub), key)
        elif key.name in ("default_worker_resources", "default_ps_resources"):
            res = read_resources(c, value, sub)
            role = key.name.removeprefix("default_").removesuffix("_resources")
            _set_default(c, draft, role, ReplicaTemplate(resources=res), key)
        elif key.name in ("worker", "ps"):
            _read_entries(c, draft, key.name, value, sub, resources_only=False)
        elif key.name in ("worker_resources", "ps_resources"):
            _read_entries(c, draft, key.name.removesuffix("_resources"), value, sub, resources_only=True)
    return draft


def _set_default(c: Collector, draft: TopologyDraft, role: str, t: ReplicaTemplate, key: YKey) -> None:
    before = draft.defaults.get(role)
    if before is not None:
        if before.resources is not None and t.resources is not None:
            c.add(key, join(draft.path, key.name), f"the default {role} resources are given twice; keep one")
            return
        t = _combine(before, t)
    draft.defaults[role] = t


def _combine(a: ReplicaTemplate, b: ReplicaTemplate) -> ReplicaTemplate:
    return ReplicaTemplate(
        resources=b.resources if b.resources is not None else a.resources,
        node_selector=b.node_selector if b.node_selector is not None else a.node_selector,
        affinity=b.affinity if b.affinity is not None else a.affinity,
        tolerations=b.tolerations if b.tolerations is not None else a.tolerations,
    )


def _read_entries(
    c: Collector, draft: TopologyDraft, role: str, node: YNode, path: str, resources_only: bool
) -> None:
    seq = c.sequence(node, path)
    if seq is None:
        return
    entries = draft.entries.setdefault(role, [])
    for i, item in enumerate(seq.items):
        sub = join(path, i)
        keys = ("index", *RESOURCE_KEYS) if resources_only else ("index", *TEMPLATE_KEYS)
        m = c.mapping(item, sub, keys)
        if m is None:
            continue
        index_node = m.get("index")
        if index_node is None:
            c.add(m, join(sub, "index"), f"missing: each entry names the index of the {role} it overrides")
            continue
        index = c.integer(index_node, join(sub, "index"), what=f"a {role} index")
        if resources_only:
            res = read_resources(c, _without(m, "index"), sub)
            template = ReplicaTemplate(resources=res)
        else:
            template = read_template(c, m, sub)
        if index is None:
            continue
        source = path.rsplit(".", 1)[-1]
        same = next((e for e in entries if e.index == index), None)
        if same is not None and (
            source in same.sources or (same.template.resources is not None and template.resources is not None)
        ):
            what = (
                f"duplicate {role} index {index}"
                if source in same.sources
                else f"the resources of {role} {index} are given twice"
            )
            c.add(index_node, join(sub, "index"), f"{what} (first given at line {same.mark.line})")
            continue
        if same is not None:  # worker: [{index: 2, node_selector}] + worker_resources: [{index: 2, cpu}]
            same.template = _combine(same.template, template)
            same.sources.add(source)
            continue
        entries.append(IndexEntry(index, index_node.mark, join(sub, "index"), template, {source}))


def _without(m: YMap, name: str) -> YMap:
    items = [(k, v) for k, v in m.items if k.name != name]
    out = YMap(items, m.mark)
    out.index = {k.name: v for k, v in items}
    return out


def read_template(c: Collector, m: YMap, path: str) -> ReplicaTemplate:
    """resources / node_selector / affinity / tolerations of one replica (or a role's default).

    The caller has already checked which keys the mapping may hold.
    """
    resources = node_selector = affinity = tolerations = None
    if (n := m.get("resources")) is not None and not is_null(n):
        resources = read_resources(c, n, join(path, "resources"))
    if (n := m.get("node_selector")) is not None and not is_null(n):
        node_selector = c.str_mapping(n, join(path, "node_selector"))
    if (n := m.get("affinity")) is not None and not is_null(n):
        am = c.mapping(n, join(path, "affinity"), AFFINITY_KEYS)
        affinity = plain(am) if am is not None else None
    if (n := m.get("tolerations")) is not None and not is_null(n):
        tolerations = _read_tolerations(c, n, join(path, "tolerations"))
    return ReplicaTemplate(resources, node_selector, affinity, tolerations)


def _read_tolerations(c: Collector, node: YNode, path: str) -> tuple[Mapping[str, Any], ...] | None:
    seq = c.sequence(node, path)
    if seq is None:
        return None
    out = []
    for i, item in enumerate(seq.items):
        m = c.mapping(item, join(path, i), TOLERATION_KEYS)
        if m is not None:
            out.append(plain(m))
    return tuple(out)


def read_resources(c: Collector, node: YNode, path: str) -> Resources | None:
    m = c.mapping(node, path, RESOURCE_KEYS)
    if m is None:
        return None
    ranges: dict[str, Range] = {}
    for name in RESOURCE_KEYS:
        value = m.get(name)
        if value is not None and not is_null(value):
            ranges[name] = _read_range(c, value, join(path, name), name)
    return Resources(**ranges)


def _read_range(c: Collector, node: YNode, path: str, what: str) -> Range:
    m = c.mapping(node, path, RANGE_KEYS)
    if m is None:
        return Range()
    values: dict[str, float | None] = {"requests": None, "limits": None}
    for name in RANGE_KEYS:
        value = m.get(name)
        if value is None or is_null(value):
            continue
        if not isinstance(value, YScalar) or isinstance(value.value, bool):
            c.add(value, join(path, name), f"expected {_EXPECTED[what]}, got {describe(value)}")
            continue
        try:
            values[name] = _PARSERS[what](plain(value))
        except ValueError as exc:
            c.add(value, join(path, name), str(exc))
            continue
        if name == "limits" and what in ("cpu", "memory") and values[name] == 0:
            c.add(
                value,
                join(path, name),
                f"a {what} limit of 0 would leave the replica no {what}, so it is refused (it is not"
                f" `no limit`); give a positive limit, or remove `limits` for none",
            )
            values[name] = None
    req, lim = values["requests"], values["limits"]
    if req is not None and lim is not None and lim < req:
        node_lim = m.get("limits")
        assert node_lim is not None
        unit = _UNITS[what]
        c.add(
            node_lim,
            join(path, "limits"),
            f"limits ({_fmt(lim)}{unit}) are below requests ({_fmt(req)}{unit});"
            " limits must be at least the requests",
        )
    return Range(**values)


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def finish_topology(
    c: Collector, draft: TopologyDraft | None, framework: Framework | None, framework_invalid: bool = False
) -> Topology:
    """Range checks, duplicate and ps-with-pytorch checks, once the framework is known.

    ``framework_invalid``: the file names a framework we already complained about; say nothing more.
    """
    if draft is None:
        return Topology()
    n_workers, workers_key = draft.counts.get("n_workers", (0, draft.key))
    n_ps, ps_key = draft.counts.get("n_ps", (0, draft.key))
    procs, procs_key = draft.counts.get("processes_per_replica", (1, draft.key))
    try:
        too_many = limits.replicas_over_limit(1 + n_workers + n_ps)
    except UsageError as exc:  # a malformed PHALANX_MAX_REPLICAS
        too_many = str(exc)
    if too_many is not None:
        # before anything is expanded: the bound is the point (n_workers: 1000000 is a typo)
        key = workers_key if n_workers >= n_ps else ps_key
        c.add(key, join(draft.path, key.name), f"1 master + {n_workers} workers + {n_ps} ps = {too_many}")
        n_workers = n_ps = 0
        draft.refused.update(("n_workers", "n_ps"))  # their indexes are not further problems
    if procs > limits.MAX_PROCESSES_PER_REPLICA:
        c.add(
            procs_key,
            join(draft.path, procs_key.name),
            f"{procs} processes per replica is more than {limits.MAX_PROCESSES_PER_REPLICA}; "
            "a replica runs one process per GPU or core",
        )
        procs = 1
    if framework is None and not framework_invalid and (n_workers > 0 or n_ps > 0):
        c.add(
            draft.key,
            draft.path,
            "replicas need a framework: add `framework: pytorch` (or tensorflow, mxnet, horovod) at the top",
        )
    no_ps = framework in (Framework.PYTORCH, Framework.HOROVOD)
    if framework is not None and no_ps:
        for key in draft.ps_keys:
            c.add(
                key,
                join(draft.path, key.name),
                f"{framework.value} has no parameter servers (only tensorflow and mxnet do); remove it",
            )
        n_ps = 0
    counts = {"worker": n_workers, "ps": n_ps}
    indexed: dict[str, dict[int, ReplicaTemplate]] = {"worker": {}, "ps": {}}
    for role, entries in draft.entries.items():
        n = counts[role]
        for e in entries:
            if role == "ps" and no_ps:
                continue
            count = "n_workers" if role == "worker" else "n_ps"
            if count in draft.refused:
                continue  # its range is unknown: the count's own problem is what to fix
            if 0 <= e.index < n:
                indexed[role][e.index] = e.template
            elif n == 0:
                why = f"{count} is 0, so there is no {role} to override"
                c.add(e.mark, e.path, f"{role} index {e.index} is out of range: {why}")
            else:
                why = f"{count} is {n}, so indexes go from 0 to {n - 1}"
                c.add(e.mark, e.path, f"{role} index {e.index} is out of range: {why}")
    return Topology(
        n_workers=n_workers,
        n_ps=n_ps,
        default_worker=draft.defaults.get("worker"),
        worker=dict(sorted(indexed["worker"].items())),
        default_ps=None if no_ps else draft.defaults.get("ps"),
        ps=dict(sorted(indexed["ps"].items())),
        processes_per_replica=procs,
    )
