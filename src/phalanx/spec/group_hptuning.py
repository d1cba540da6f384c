"""A group's `hptuning` (apart from its matrix): the metric, the search algorithm and its budget,
early stopping and per-trial pruning, each read with its position and checked against the others."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from phalanx.spec.errors import Collector, describe, did_you_mean, join
from phalanx.spec.group_matrix import _matrix_mark, _read_matrix
from phalanx.spec.group_model import (
    HPTUNING_KEYS,
    MAX_GRID,
    OPTIMIZATIONS,
    PRUNERS,
    SEARCHES,
    Distribution,
    EarlyStop,
    HPTuning,
    Metric,
    Pruning,
    Search,
    grid_size,
)
from phalanx.spec.yamltree import YKey, YMap, YNode, YScalar, YSeq, is_null, plain


def _read_metric(c: Collector, node: YNode | None, path: str, at: YNode, why: str) -> Metric | None:
    if node is None or is_null(node):
        c.add(
            at, join(path, "metric"), f"missing; {why} needs metric: {{name: loss, optimization: minimize}}"
        )
        return None
    m = c.mapping(node, join(path, "metric"), ("name", "optimization"))
    if m is None:
        return None
    name_node = m.get("name")
    name = c.text(name_node, join(path, "metric.name")) if name_node is not None else None
    if m.get("name") is None:
        c.add(m, join(path, "metric.name"), "missing; the name of the metric the trials report, e.g. loss")
    opt = _optimization(c, m.get("optimization"), join(path, "metric.optimization"))
    return Metric(name, opt) if name else None


def _optimization(c: Collector, node: YNode | None, path: str) -> str:
    if node is None or is_null(node):
        return "minimize"
    v = node.value if isinstance(node, YScalar) else None
    if v not in OPTIMIZATIONS:
        c.add(node, path, f"expected minimize or maximize, got {describe(node)}")
        return "minimize"
    return str(v)


def _read_hptuning(c: Collector, node: YNode) -> HPTuning | None:
    m = c.mapping(node, "hptuning", HPTUNING_KEYS)
    if m is None:
        return None
    concurrency = 1
    if (n := m.get("concurrency")) is not None and not is_null(n):
        concurrency = c.integer(n, "hptuning.concurrency", minimum=1, what="a number of trials at once") or 1
    matrix = _read_matrix(c, m)
    searches = [(k, v) for k, v in m.items if k.name in SEARCHES]
    if len(searches) > 1:
        c.add(
            searches[1][0],
            join("hptuning", searches[1][0].name),
            f"give one search, not two ({searches[0][0].name} is at line {searches[0][0].mark.line})",
        )
    key: YNode | YKey
    if searches:
        key, snode = searches[0]
        search = _read_search(c, searches[0][0].name, snode, m, matrix)
    else:  # Polyaxon's default: every point of the matrix (grid search)
        key, search = m, _read_search(c, "grid_search", YMap([], m.mark), m, matrix)
    grid = "grid_search" if searches else "grid_search (the search when none is given)"
    if (mn := m.get("metric")) is not None and not is_null(mn) and search is not None:
        # Phalanx's addition for grid and random search: the metric that picks the best trial
        if search.metric is not None:
            c.add(
                m.key("metric") or mn,
                "hptuning.metric",
                f"{searches[0][0].name} has its own metric; give it once",
            )
        else:
            search = replace(search, metric=_read_metric(c, mn, "hptuning", m, "hptuning.metric"))
    early = _read_early_stopping(c, m.get("early_stopping"))
    pruning = _read_pruning(c, m.get("pruning"), search)
    _check_early_metrics(c, m.get("early_stopping"), early, search, pruning)
    if search is None or matrix is None:
        return None
    if search.kind == "grid":
        continuous = [d for d in matrix if not d.discrete]
        for d in continuous:
            c.add(
                _matrix_mark(m, d.name),
                join("hptuning.matrix", d.name),
                f"{grid} needs a list of values; {d.kind} is continuous (use values, range, linspace, "
                "logspace or geomspace, or random_search)",
            )
        if not continuous and grid_size(matrix) > MAX_GRID:
            c.add(
                key,
                "hptuning.grid_search",
                f"the grid of {grid} has {grid_size(matrix)} points (at most {MAX_GRID}); "
                "set n_experiments or use random_search",
            )
    return HPTuning(
        concurrency=concurrency, matrix=matrix, search=search, early_stopping=early, pruning=pruning
    )


_SEARCH_KEYS = {
    "grid_search": ("n_experiments",),
    "random_search": ("n_experiments", "seed"),
    "hyperband": ("max_iter", "eta", "resource", "metric", "resume", "seed"),
    "bo": ("n_iterations", "n_initial_trials", "metric", "utility_function", "seed"),
}


@dataclass(frozen=True)
class _Section:
    """One ``hptuning.<algorithm>`` mapping being read: its keys' errors name ``path``."""

    c: Collector
    m: YMap
    node: YNode
    path: str

    def integer(self, key: str, minimum: int = 1) -> int | None:
        n = self.m.get(key)
        if n is None or is_null(n):
            return None
        return self.c.integer(n, join(self.path, key), minimum=minimum)

    def require(self, key: str, hint: str) -> None:
        """An error at the section when ``key`` is absent."""
        if self.m.get(key) is None:
            self.c.add(self.m if self.m.items else self.node, join(self.path, key), f"missing; {hint}")

    def metric(self, kind: str) -> Metric | None:
        return _read_metric(
            self.c, self.m.get("metric"), self.path, self.m if self.m.items else self.node, kind
        )


def _read_search(
    c: Collector, kind: str, node: YNode, hp: YMap, matrix: tuple[Distribution, ...] | None
) -> Search | None:
    path = join("hptuning", kind)
    m = c.mapping(node, path, _SEARCH_KEYS[kind]) if not is_null(node) else YMap([], node.mark)
    if m is None:
        return None
    section = _Section(c, m, node, path)
    seed = section.integer("seed", 0)
    if seed is None and (n := hp.get("seed")) is not None and not is_null(n):
        seed = c.integer(n, "hptuning.seed", minimum=0)
    if kind == "grid_search":
        return Search("grid", section.integer("n_experiments"), seed=seed)
    if kind == "random_search":
        count = section.integer("n_experiments")
        if count is None:
            section.require("n_experiments", "how many trials to run, e.g. n_experiments: 10")
        return Search("random", count, seed=seed)
    if kind == "bo":
        return _read_bo(section, seed)
    return _read_hyperband(section, seed, matrix)


def _read_bo(section: _Section, seed: int | None) -> Search:
    c, m, path = section.c, section.m, section.path
    metric = section.metric("bo")
    count = section.integer("n_iterations")
    section.require("n_iterations", "how many trials to run, e.g. n_iterations: 15")
    uf = m.get("utility_function")
    if uf is not None:
        c.note(
            m.key("utility_function") or uf,
            join(path, "utility_function"),
            "accepted and ignored: bo samples with Optuna's TPE (n_initial_trials random trials first); "
            "acquisition function and Gaussian-process settings have no equivalent",
        )
    return Search(
        "bo",
        count,
        seed=seed,
        metric=metric,
        n_initial_trials=section.integer("n_initial_trials", 0),
        options={"utility_function": plain(uf)} if uf is not None else {},
    )


def _read_hyperband(section: _Section, seed: int | None, matrix: tuple[Distribution, ...] | None) -> Search:
    m = section.m
    metric = section.metric("hyperband")
    max_iter = section.integer("max_iter")
    section.require("max_iter", "the most resource (e.g. epochs) a trial gets, e.g. max_iter: 81")
    eta = section.integer("eta", 2) or 3
    resource, rtype = _read_resource(section, matrix)
    resume = bool(m.get("resume").value) if isinstance(m.get("resume"), YScalar) else False  # type: ignore[union-attr]
    n_trials = hyperband_trials(max_iter, eta) if max_iter else None
    return Search(
        "hyperband",
        n_trials,
        seed=seed,
        metric=metric,
        max_iter=max_iter,
        eta=eta,
        resource=resource,
        resource_type=rtype,
        resume=resume,
    )


def _read_resource(section: _Section, matrix: tuple[Distribution, ...] | None) -> tuple[str | None, str]:
    """Hyperband's ``resource: {name, type}``: the param that receives the budget, and its type."""
    c, path = section.c, section.path
    resource, rtype = None, "int"
    rnode = section.m.get("resource")
    if rnode is None or is_null(rnode):
        c.add(
            section.m if section.m.items else section.node,
            join(path, "resource"),
            "missing; the param that receives the budget, e.g. resource: {name: epochs, type: int}",
        )
        return resource, rtype
    rm = c.mapping(rnode, join(path, "resource"), ("name", "type"))
    if rm is not None:
        if rm.get("name") is None:
            c.add(rm, join(path, "resource.name"), "missing; the param name that receives the budget")
        else:
            resource = c.text(rm.get("name"), join(path, "resource.name"))  # type: ignore[arg-type]
        if (t := rm.get("type")) is not None:
            tv = t.value if isinstance(t, YScalar) else None
            if tv not in ("int", "float"):
                c.add(t, join(path, "resource.type"), f"expected int or float, got {describe(t)}")
            else:
                rtype = str(tv)
    if resource and matrix and resource in {d.name for d in matrix}:
        c.add(
            rnode,
            join(path, "resource.name"),
            f"{resource!r} is also in the matrix; the budget is set by hyperband",
        )
    return resource, rtype


def hyperband_trials(max_iter: int, eta: int) -> int:
    """How many configurations Hyperband (Li et al.) starts over all its brackets."""
    s_max = math.floor(math.log(max_iter) / math.log(eta) + 1e-9)
    b = (s_max + 1) * max_iter
    return sum(math.ceil(b / max_iter / (s + 1) * eta**s) for s in range(s_max + 1))


def _read_early_stopping(c: Collector, node: YNode | None) -> tuple[EarlyStop, ...]:
    if node is None or is_null(node):
        return ()
    seq = c.sequence(node, "hptuning.early_stopping")
    out: list[EarlyStop] = []
    for i, item in enumerate(seq.items if seq else []):
        path = join("hptuning.early_stopping", i)
        m = c.mapping(item, path, ("metric", "value", "optimization", "policy"))
        if m is None:
            continue
        metric_node, value_node = m.get("metric"), m.get("value")
        metric = c.text(metric_node, join(path, "metric")) if metric_node is not None else None
        if metric_node is None:
            c.add(m, join(path, "metric"), "missing; the metric name, e.g. metric: accuracy")
        value = c.number(value_node, join(path, "value"), positive=False) if value_node is not None else None
        if value_node is None:
            c.add(m, join(path, "value"), "missing; the value that stops the group, e.g. value: 0.95")
        opt = _optimization(c, m.get("optimization"), join(path, "optimization"))
        if metric is not None and value is not None:
            out.append(EarlyStop(metric, value, opt))
    return tuple(out)


def _check_early_metrics(
    c: Collector,
    node: YNode | None,
    early: tuple[EarlyStop, ...],
    search: Search | None,
    pruning: Pruning | None,
) -> None:
    """An early-stopping metric one typo away from the metric the search reads (`scor` beside
    `score`) never fires: no trial reports it, and the group runs every trial. An error; a near
    name that contains the other (`loss` beside `val_loss`) may be meant, so only a note."""
    known = {x.name for x in (search.metric if search else None, pruning.metric if pruning else None) if x}
    if not known or not isinstance(node, YSeq):
        return
    for i, (rule, item) in enumerate(zip(early, node.items, strict=False)):
        hint = did_you_mean(rule.metric, sorted(known))
        if rule.metric in known or not hint:
            continue
        at = item.get("metric") if isinstance(item, YMap) else None
        path = join(join("hptuning.early_stopping", i), "metric")
        reads = ", ".join(sorted(known))
        text = (
            f"{rule.metric!r} is not the metric the search reads ({reads}){hint} Early stopping fires"
            f" only once a finished trial reports {rule.metric!r}"
        )
        if any(_qualified(rule.metric, k) for k in known):
            c.note(at or item, path, text + " (fine if the trials report it too)")
        else:
            c.add(at or item, path, text + "; fix the name")


def _qualified(a: str, b: str) -> bool:
    """Whether one name is the other with a word before or after it (`val_loss`, `loss/train`)."""
    short, long = sorted((a, b), key=len)
    seps = "_/.-"
    head = long.startswith(short) and long[len(short)] in seps
    return head or (long.endswith(short) and long[-len(short) - 1] in seps)


def _read_pruning(c: Collector, node: YNode | None, search: Search | None) -> Pruning | None:
    if search is not None and search.kind == "hyperband" and search.metric and search.max_iter:
        if node is not None and not is_null(node):
            c.add(node, "hptuning.pruning", "hyperband prunes by itself; remove pruning or use random_search")
        return Pruning(
            "hyperband",
            search.metric,
            min_resource=1,
            reduction_factor=search.eta or 3,
            max_resource=search.max_iter,
        )
    if node is None or is_null(node):
        return None
    path = "hptuning.pruning"
    m = c.mapping(
        node, path, ("kind", "metric", "warmup_steps", "min_trials", "min_resource", "reduction_factor")
    )
    if m is None:
        return None
    kind_node = m.get("kind")
    kind = "median"
    if kind_node is not None:
        kv = kind_node.value if isinstance(kind_node, YScalar) else None
        if kv not in PRUNERS:
            shown = kv if isinstance(kv, str) else describe(kind_node)
            c.add(
                kind_node,
                join(path, "kind"),
                f"unknown pruner {shown!r}{did_you_mean(str(kv), PRUNERS)} "
                f"(expected one of: {', '.join(PRUNERS)})",
            )
            return None
        kind = str(kv)
    if kind == "none":
        return None
    if m.get("metric") is not None or search is None or search.metric is None:
        metric = _read_metric(c, m.get("metric"), path, m, "pruning")
    else:
        metric = search.metric
    if metric is None:
        return None

    def integer(key: str, default: int, minimum: int) -> int:
        n = m.get(key)
        if n is None or is_null(n):
            return default
        return c.integer(n, join(path, key), minimum=minimum) or default

    return Pruning(
        kind,
        metric,
        warmup_steps=integer("warmup_steps", 0, 0),
        min_trials=integer("min_trials", 1, 1),
        min_resource=integer("min_resource", 1, 1),
        reduction_factor=integer("reduction_factor", 3, 2),
    )
