"""`kind: group` files: an experiment plus `hptuning` (Polyaxon's hyperparameter search).

A group is read exactly like an experiment (same keys, same located problems) with the matrix names
counted as placeholders; what it adds is a GroupSpec: the trials' base ExperimentSpec and the search
(matrix of distributions, one search algorithm, early stopping, per-trial pruning). Nothing here
imports Optuna: the search space is plain data, turned into Optuna calls by ``phalanx.groups.search``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from phalanx.errors import Problem, SpecError
from phalanx.spec.errors import Collector, describe, did_you_mean, join, sorted_problems
from phalanx.spec.loader import MAX_FILE_BYTES
from phalanx.spec.model import ExperimentSpec
from phalanx.spec.schema import PLACEHOLDER, GroupReading, read_spec
from phalanx.spec.yamltree import Mark, TreeError, YMap, YNode, YScalar, YSeq, compose, is_null, plain

# name -> the arguments, in the order of both the list form [a, b, c] and the string form 'a:b:c'
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "values": (),
    "pvalues": (),
    "range": ("start", "stop", "step"),
    "linspace": ("start", "stop", "num"),
    "logspace": ("start", "stop", "num"),
    "geomspace": ("start", "stop", "num"),
    "uniform": ("low", "high"),
    "quniform": ("low", "high", "q"),
    "loguniform": ("low", "high"),
    "qloguniform": ("low", "high", "q"),
    "normal": ("loc", "scale"),
    "qnormal": ("loc", "scale", "q"),
    "lognormal": ("loc", "scale"),
    "qlognormal": ("loc", "scale", "q"),
}
DISCRETE = ("values", "pvalues", "range", "linspace", "logspace", "geomspace")
SEARCHES = ("grid_search", "random_search", "hyperband", "bo")
HPTUNING_KEYS = ("concurrency", "matrix", *SEARCHES, "metric", "early_stopping", "pruning", "seed")
PRUNERS = ("median", "successive_halving", "none")
OPTIMIZATIONS = ("minimize", "maximize")
MAX_GRID = 100_000  # a grid larger than this is a mistake (and would be held in memory)


@dataclass(frozen=True)
class Distribution:
    """One matrix entry. ``args`` holds the numbers by name; ``choices`` the values of a discrete one
    (for pvalues, ``weights`` their probabilities)."""

    name: str
    kind: str
    args: Mapping[str, float] = field(default_factory=dict)
    choices: tuple[Any, ...] = ()
    weights: tuple[float, ...] = ()

    @property
    def discrete(self) -> bool:
        return self.kind in DISCRETE

    def describe(self) -> str:
        if self.kind == "values":
            return f"values {list(self.choices)}"
        if self.kind == "pvalues":
            return "pvalues " + ", ".join(
                f"{c}: {w:g}" for c, w in zip(self.choices, self.weights, strict=True)
            )
        shown = ", ".join(f"{k}={_num(v)}" for k, v in self.args.items())
        extra = f" -> {len(self.choices)} values" if self.discrete else ""
        return f"{self.kind}({shown}){extra}"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "kind": self.kind, "args": dict(self.args)}
        if self.discrete:
            doc["choices"] = list(self.choices)
        if self.weights:
            doc["weights"] = list(self.weights)
        return doc


@dataclass(frozen=True)
class Metric:
    name: str
    optimization: str = "minimize"

    @property
    def maximize(self) -> bool:
        return self.optimization == "maximize"


@dataclass(frozen=True)
class EarlyStop:
    """Stop the whole group once any finished trial reaches ``value`` of ``metric``."""

    metric: str
    value: float
    optimization: str = "minimize"

    def reached(self, value: float) -> bool:
        return value >= self.value if self.optimization == "maximize" else value <= self.value


@dataclass(frozen=True)
class Pruning:
    """Per-trial pruning on a metric the trial reports while it runs (step = the metric's step)."""

    kind: str  # median, successive_halving or hyperband (set by a hyperband search)
    metric: Metric
    warmup_steps: int = 0  # median: no decision before this step
    min_trials: int = 1  # median: trials that must have reported at a step before comparing
    min_resource: int = 1  # successive halving / hyperband: first rung's step
    reduction_factor: int = 3
    max_resource: int | None = None  # hyperband


@dataclass(frozen=True)
class Search:
    kind: str  # grid, random, hyperband, bo
    n_trials: int | None  # None: the whole grid
    seed: int | None = None
    metric: Metric | None = None
    n_initial_trials: int | None = None  # bo: random trials before the model guides sampling
    max_iter: int | None = None  # hyperband: the most resource a trial gets
    eta: int | None = None
    resource: str | None = None  # hyperband: the param that receives the budget
    resource_type: str = "int"
    resume: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)  # accepted keys with no effect here


@dataclass(frozen=True)
class HPTuning:
    concurrency: int
    matrix: tuple[Distribution, ...]
    search: Search
    early_stopping: tuple[EarlyStop, ...] = ()
    pruning: Pruning | None = None

    @property
    def metric(self) -> Metric | None:
        return self.search.metric or (self.pruning.metric if self.pruning else None)

    def planned_trials(self) -> int:
        """How many trials the search starts at most."""
        if self.search.n_trials is not None:
            if self.search.kind == "grid":  # n_experiments is "at most": never a combination twice
                return min(self.search.n_trials, grid_size(self.matrix))
            return self.search.n_trials
        return grid_size(self.matrix)


@dataclass(frozen=True)
class GroupSpec:
    base: ExperimentSpec  # every trial: this with the sampled values added to params
    hptuning: HPTuning
    notes: tuple[str, ...] = ()

    def trial_spec(self, values: Mapping[str, Any]) -> ExperimentSpec:

        return replace(self.base, params={**self.base.params, **values})


def grid_size(matrix: tuple[Distribution, ...]) -> int:
    return math.prod(len(d.choices) for d in matrix) if matrix else 0


# ---- loading ----------------------------------------------------------------------------------


def load_group(
    path: str | Path,
    params: Mapping[str, Any] | None = None,
    allow_unused: bool = False,
    extra_params: bool = False,
) -> GroupSpec:
    """Read and validate a group file; SpecError (exit 2) lists every problem with its place."""
    p = Path(path)
    name = str(path)
    try:
        data = p.read_bytes()[: MAX_FILE_BYTES + 1]
    except FileNotFoundError:
        raise SpecError(Problem(f"{name}: no such file")) from None
    except IsADirectoryError:
        raise SpecError(Problem(f"{name} is a directory; give the group file inside it")) from None
    except OSError as exc:
        raise SpecError(Problem(f"{name}: cannot read it ({exc.strerror or exc})")) from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(Problem(f"{name}: the file is larger than 1 MiB, refused"))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecError(Problem(f"{name}: the file is not UTF-8 text")) from None
    group = load_group_text(text, name, params=params, allow_unused=allow_unused, extra_params=extra_params)

    return replace(group, base=replace(group.base, source_file=str(p.resolve())))


def load_group_text(
    text: str,
    filename: str = "<text>",
    params: Mapping[str, Any] | None = None,
    allow_unused: bool = False,
    extra_params: bool = False,
) -> GroupSpec:
    """``extra_params``: a ``--param`` that the file neither declares nor uses is recorded instead of
    refused (as ``phalanx run --extra-params``): a misspelt one would otherwise run the whole search
    with the file's value."""

    c = Collector(filename)
    try:
        root, problems = compose(text, filename)
    except TreeError as exc:
        raise SpecError(sorted_problems(exc.problems)) from None
    c.problems.extend(problems)
    if not isinstance(root, YMap):
        c.add(
            root if root is not None else Mark(1, 1),
            "",
            "expected a mapping with version, kind, hptuning, run",
        )
        c.raise_if_any()
    assert isinstance(root, YMap)
    defaults = _read_inputs(c, root.get("inputs"))
    _single_process_framework(c, root)
    hp_node = root.get("hptuning")
    hptuning = None
    if hp_node is None or is_null(hp_node):
        c.add(
            root.key("hptuning") or root,
            "hptuning",
            "missing; a group needs hptuning: {matrix: ..., random_search: ...}",
        )
    else:
        hptuning = _read_hptuning(c, hp_node)
    # the matrix names as written, even when a distribution is wrong: no second error for {{ lr }}
    names = _matrix_names(hp_node)
    # hyperband's budget name as written too: a wrong distribution must not make {{ epochs }} unknown
    resource = hptuning.search.resource if hptuning else _resource_name(hp_node)
    sampled = names + ((resource,) if resource else ())
    spec = read_spec(
        c,
        root,
        dict(params or {}),
        group=GroupReading(defaults=defaults, sampled=sampled),
        extra_params=extra_params,
    )
    _check_used(c, root, names, resource, allow_unused)
    _check_overrides(c, hp_node, dict(params or {}), resource)
    c.raise_if_any()
    assert spec is not None and hptuning is not None
    spec = replace(spec, source_text=text)
    return GroupSpec(base=spec, hptuning=hptuning, notes=tuple(str(n) for n in sorted_problems(c.notes)))


SINGLE_PROCESS_FRAMEWORKS = ("keras", "scikit-learn", "sklearn", "xgboost", "lightgbm")


def _single_process_framework(c: Collector, root: YMap) -> None:
    """`framework: keras` (Polyaxon's examples): a one-process trial; there is nothing to wire, so the
    key is dropped with a note rather than refused."""
    node = root.get("framework")
    if isinstance(node, YScalar) and node.value in SINGLE_PROCESS_FRAMEWORKS:
        c.note(node, "framework", f"{node.value}: each trial runs as one process (nothing to wire); ignored")
        root.items = [(k, v) for k, v in root.items if k.name != "framework"]
        root.index.pop("framework", None)


def _read_inputs(c: Collector, node: YNode | None) -> dict[str, Any]:
    """Polyaxon 0.6 `inputs: [{name, type, default, is_optional}]`: their defaults become params."""
    if node is None or is_null(node):
        return {}
    seq = c.sequence(node, "inputs")
    out: dict[str, Any] = {}
    for i, item in enumerate(seq.items if seq else []):
        path = join("inputs", i)
        m = c.mapping(item, path, ("name", "type", "default", "is_optional", "description", "value"))
        if m is None:
            continue
        name_node = m.get("name")
        if name_node is None:
            c.add(m, join(path, "name"), "missing; every input needs a name")
            continue
        name = c.text(name_node, join(path, "name"))
        value_node = m.get("value") or m.get("default")
        if name is None:
            continue
        if value_node is None or is_null(value_node):
            c.add(m, path, f"input {name!r} has no default; give one, or pass --param {name}=VALUE")
            continue
        out[name] = plain(value_node)
    return out


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
    if not searches:
        c.add(
            m,
            "hptuning",
            "no search given; add one of "
            + ", ".join(SEARCHES)
            + " (e.g. random_search: {n_experiments: 10})",
        )
        return None
    key, snode = searches[0]
    search = _read_search(c, key.name, snode, m, matrix)
    if (mn := m.get("metric")) is not None and not is_null(mn) and search is not None:
        # Phalanx's addition for grid and random search: the metric that picks the best trial
        if search.metric is not None:
            c.add(m.key("metric") or mn, "hptuning.metric", f"{key.name} has its own metric; give it once")
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
                f"grid_search needs a list of values; {d.kind} is continuous (use values, range, linspace, "
                "logspace or geomspace, or random_search)",
            )
        if not continuous and grid_size(matrix) > MAX_GRID:
            c.add(
                key,
                "hptuning.grid_search",
                f"the grid has {grid_size(matrix)} points (at most {MAX_GRID}); "
                "set n_experiments or use random_search",
            )
    return HPTuning(
        concurrency=concurrency, matrix=matrix, search=search, early_stopping=early, pruning=pruning
    )


def _matrix_mark(m: YMap, name: str) -> YNode | Mark:
    matrix = m.get("matrix")
    if isinstance(matrix, YMap):
        k = matrix.key(name)
        if k is not None:
            return k.mark
    return m.mark


def _budget_mark(m: YMap) -> YNode | Mark:
    """Where hyperband's `resource: {name: ...}` is written (the search's node if not found)."""
    search = m.get("hyperband")
    resource = search.get("resource") if isinstance(search, YMap) else None
    name = resource.get("name") if isinstance(resource, YMap) else None
    found = name or resource or search
    return found.mark if found is not None else m.mark


def _read_matrix(c: Collector, m: YMap) -> tuple[Distribution, ...] | None:
    node = m.get("matrix")
    if node is None or is_null(node):
        c.add(
            m,
            "hptuning.matrix",
            "missing; give the params to search, e.g. matrix: {lr: {uniform: 0.001:0.1}}",
        )
        return None
    mm = c.mapping(node, "hptuning.matrix")
    if mm is None:
        return None
    if not mm.items:
        c.add(mm, "hptuning.matrix", "is empty; give at least one param to search")
        return None
    out: list[Distribution] = []
    for key, value in mm.items:
        d = _read_distribution(c, key.name, value, join("hptuning.matrix", key.name))
        if d is not None:
            out.append(d)
    return tuple(out) if len(out) == len(mm.items) else None


def _read_distribution(c: Collector, name: str, node: YNode, path: str) -> Distribution | None:
    dm = c.mapping(node, path)
    if dm is None:
        return None
    if len(dm.items) != 1:
        c.add(dm, path, "give exactly one distribution, e.g. {uniform: 0:1} or {values: [1, 2, 3]}")
        return None
    key, arg = dm.items[0]
    kind = key.name
    sub = join(path, kind)
    if kind not in DISTRIBUTIONS:
        c.add(
            key,
            sub,
            f"unknown distribution '{kind}'{did_you_mean(kind, DISTRIBUTIONS)} (expected one of: "
            + ", ".join(DISTRIBUTIONS)
            + ")",
        )
        return None
    if kind == "values":
        seq = c.sequence(arg, sub)
        if seq is None:
            return None
        vals = [plain(v) for v in seq.items]
        if not vals:
            c.add(seq, sub, "is empty; give at least one value")
            return None
        for v, item in zip(vals, seq.items, strict=True):
            if not (v is None or isinstance(v, bool | int | float | str)):
                c.add(item, sub, f"expected a number, text or boolean, got {describe(item)}")
                return None
        return Distribution(name, kind, choices=tuple(vals))
    if kind == "pvalues":
        return _read_pvalues(c, name, arg, sub)
    names = DISTRIBUTIONS[kind]
    nums = _numbers(c, arg, sub, names)
    if nums is None:
        return None
    args = dict(zip(names, nums, strict=True))
    return _validated(c, name, kind, args, arg, sub)


def _read_pvalues(c: Collector, name: str, arg: YNode, sub: str) -> Distribution | None:
    seq = c.sequence(arg, sub)
    if seq is None:
        return None
    choices: list[Any] = []
    weights: list[float] = []
    for i, item in enumerate(seq.items):
        if not isinstance(item, YSeq) or len(item.items) != 2 or not isinstance(item.items[1], YScalar):
            c.add(item, join(sub, i), f"expected a [value, probability] pair, got {describe(item)}")
            return None
        w = item.items[1].value
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= 1:
            c.add(
                item.items[1],
                join(sub, i),
                f"a probability is a number from 0 to 1, got {describe(item.items[1])}",
            )
            return None
        choices.append(plain(item.items[0]))
        weights.append(float(w))
    if not choices:
        c.add(seq, sub, "is empty; give at least one [value, probability] pair")
        return None
    if abs(sum(weights) - 1) > 1e-6:
        c.add(seq, sub, f"the probabilities add up to {sum(weights):g}; they must add up to 1")
        return None
    return Distribution(name, "pvalues", choices=tuple(choices), weights=tuple(weights))


def _numbers(c: Collector, node: YNode, path: str, names: tuple[str, ...]) -> list[float] | None:
    """[a, b, c], 'a:b:c' or {name: value}: the numbers in ``names`` order."""
    form = f"[{', '.join(names)}] or '{':'.join(names)}'"
    raw: list[Any]
    if isinstance(node, YScalar) and (isinstance(node.value, str) or ":" in node.raw):
        # `1:0` unquoted is a YAML 1.1 base-60 number (60): the text as written is what was meant
        text = node.value if isinstance(node.value, str) else node.raw.strip()
        raw = [p.strip() for p in text.split(":")]
    elif isinstance(node, YSeq):
        raw = [plain(v) for v in node.items]
    elif isinstance(node, YMap):
        unknown = [k for k, _ in node.items if k.name not in names]
        for k in unknown:
            c.add(
                k,
                join(path, k.name),
                f"unknown key{did_you_mean(k.name, names)} (allowed here: {', '.join(names)})",
            )
        if unknown:
            return None
        missing = [n for n in names if node.get(n) is None]
        if missing:
            c.add(node, path, f"missing {', '.join(missing)}; expected {form}")
            return None
        raw = [plain(node.get(n)) for n in names]  # type: ignore[arg-type]
    else:
        c.add(node, path, f"expected {form}, got {describe(node)}")
        return None
    if len(raw) != len(names):
        c.add(node, path, f"expected {len(names)} numbers, {form}; got {len(raw)}")
        return None
    out: list[float] = []
    for n, v in zip(names, raw, strict=True):
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                c.add(node, path, f"{n} {v!r} is not a number; expected {form}")
                return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            c.add(node, path, f"{n} is not a number; expected {form}")
            return None
        out.append(float(v))
    return out


def _validated(
    c: Collector, name: str, kind: str, args: dict[str, float], node: YNode, path: str
) -> Distribution | None:
    def bad(message: str) -> None:
        c.add(node, path, message)

    if "low" in args and args["low"] >= args["high"]:
        bad(f"bounds reversed or equal: low {_num(args['low'])} must be below high {_num(args['high'])}")
        return None
    if "scale" in args and args["scale"] <= 0:
        bad(f"scale must be more than 0, got {_num(args['scale'])}")
        return None
    if "q" in args and args["q"] <= 0:
        bad(f"q (the step values are rounded to) must be more than 0, got {_num(args['q'])}")
        return None
    if kind.endswith("loguniform") and 0 < args["low"] < args["high"] <= 1:
        # Polyaxon's (and Azure's) bounds are natural logs: [0.0001, 0.1] draws 1.0001..1.105, which
        # is surely not the learning rate meant; a note, not an error, since it is a valid search
        low, high = args["low"], args["high"]
        q = f", {_num(args['q'])}" if "q" in args else ""
        c.note(
            node,
            path,
            f"the bounds are natural logs, so this draws from exp({_num(low)}) = {math.exp(low):.4g}"
            f" to exp({_num(high)}) = {math.exp(high):.4g}; for values from {_num(low)} to {_num(high)}"
            f" write {kind}: [{math.log(low):.4g}, {math.log(high):.4g}{q}]",
        )
    choices: tuple[Any, ...] = ()
    if kind == "range":
        start, stop, step = args["start"], args["stop"], args["step"]
        if step == 0:
            bad("step must not be 0")
            return None
        if (stop - start) / step <= 0:
            bad(f"bounds reversed: range from {_num(start)} to {_num(stop)} by {_num(step)} is empty")
            return None
        if (stop - start) / step > MAX_GRID:
            bad(f"range has more than {MAX_GRID} values")
            return None
        count = math.ceil((stop - start) / step)  # numpy.arange's length: stop excluded
        choices = tuple(_clean(start + i * step) for i in range(count))
        if all(float(x).is_integer() for x in (start, stop, step)):
            choices = tuple(int(v) for v in choices)
    elif kind in ("linspace", "logspace", "geomspace"):
        num = args["num"]
        if not num.is_integer() or num < 1 or num > MAX_GRID:
            bad(f"num (how many values) must be a whole number from 1 to {MAX_GRID}, got {_num(num)}")
            return None
        start, stop = args["start"], args["stop"]
        if start >= stop:
            bad(f"bounds reversed or equal: start {_num(start)} must be below stop {_num(stop)}")
            return None
        if kind == "geomspace" and start <= 0:
            bad(f"geomspace needs positive bounds, got start {_num(start)}")
            return None
        choices = tuple(_clean(v) for v in _spaced(kind, start, stop, int(num)))
    return Distribution(name, kind, args=args, choices=choices)


def _spaced(kind: str, start: float, stop: float, num: int) -> list[float]:
    """numpy's linspace, logspace (base 10) and geomspace, without numpy (not a base dependency)."""
    if kind == "geomspace":
        start, stop = math.log10(start), math.log10(stop)
    points = [start + (stop - start) * i / (num - 1) for i in range(num)] if num > 1 else [start]
    return points if kind == "linspace" else [10.0**p for p in points]


def _clean(v: Any) -> float:
    """A float as the shortest Python float that prints well (0.1, not 0.10000000000000002)."""
    return float(f"{float(v):.12g}")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


_SEARCH_KEYS = {
    "grid_search": ("n_experiments",),
    "random_search": ("n_experiments", "seed"),
    "hyperband": ("max_iter", "eta", "resource", "metric", "resume", "seed"),
    "bo": ("n_iterations", "n_initial_trials", "metric", "utility_function", "seed"),
}


def _read_search(
    c: Collector, kind: str, node: YNode, hp: YMap, matrix: tuple[Distribution, ...] | None
) -> Search | None:
    path = join("hptuning", kind)
    m = c.mapping(node, path, _SEARCH_KEYS[kind]) if not is_null(node) else YMap([], node.mark)
    if m is None:
        return None

    def integer(key: str, minimum: int = 1) -> int | None:
        n = m.get(key)
        if n is None or is_null(n):
            return None
        return c.integer(n, join(path, key), minimum=minimum)

    seed = integer("seed", 0)
    if seed is None and (n := hp.get("seed")) is not None and not is_null(n):
        seed = c.integer(n, "hptuning.seed", minimum=0)
    if kind == "grid_search":
        return Search("grid", integer("n_experiments"), seed=seed)
    if kind == "random_search":
        count = integer("n_experiments")
        if count is None and m.get("n_experiments") is None:
            c.add(
                m if m.items else node,
                join(path, "n_experiments"),
                "missing; how many trials to run, e.g. n_experiments: 10",
            )
        return Search("random", count, seed=seed)
    if kind == "bo":
        metric = _read_metric(c, m.get("metric"), path, m if m.items else node, "bo")
        count = integer("n_iterations")
        if m.get("n_iterations") is None:
            c.add(
                m if m.items else node,
                join(path, "n_iterations"),
                "missing; how many trials to run, e.g. n_iterations: 15",
            )
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
            n_initial_trials=integer("n_initial_trials", 0),
            options={"utility_function": plain(uf)} if uf is not None else {},
        )
    # hyperband
    metric = _read_metric(c, m.get("metric"), path, m if m.items else node, "hyperband")
    max_iter = integer("max_iter")
    if m.get("max_iter") is None:
        c.add(
            m if m.items else node,
            join(path, "max_iter"),
            "missing; the most resource (e.g. epochs) a trial gets, e.g. max_iter: 81",
        )
    eta = integer("eta", 2) or 3
    resource, rtype = None, "int"
    rnode = m.get("resource")
    if rnode is None or is_null(rnode):
        c.add(
            m if m.items else node,
            join(path, "resource"),
            "missing; the param that receives the budget, e.g. resource: {name: epochs, type: int}",
        )
    else:
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
    if resource and matrix and rnode is not None and resource in {d.name for d in matrix}:
        c.add(
            rnode,
            join(path, "resource.name"),
            f"{resource!r} is also in the matrix; the budget is set by hyperband",
        )
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


def _check_overrides(
    c: Collector, hp_node: YNode | None, params: dict[str, Any], resource: str | None
) -> None:
    """`--param lr=0.01` for a name the search samples (or hyperband's budget) would be replaced in
    every trial by the sampled value: the user's value silently lost. Said where the name is searched."""
    if not params or not isinstance(hp_node, YMap):
        return
    matrix = hp_node.get("matrix")
    for name, value in params.items():
        shown = f"--param {name}={value}"
        if isinstance(matrix, YMap) and matrix.get(name) is not None:
            c.add(
                matrix.key(name) or matrix,
                join("hptuning.matrix", name),
                f"{shown} sets a name the search samples, so every trial would use the sampled value;"
                f" drop {shown}, or remove {name} from the matrix to fix it for every trial",
            )
        elif name == resource:
            c.add(
                hp_node.key("hyperband") or hp_node,
                "hptuning.hyperband.resource",
                f"{shown} sets hyperband's budget param, which every trial gets as max_iter;"
                " drop it, or change hptuning.hyperband.max_iter",
            )


def _resource_name(hp_node: YNode | None) -> str | None:
    """`hptuning.hyperband.resource.name` as written, when the hptuning as a whole is invalid."""
    band = hp_node.get("hyperband") if isinstance(hp_node, YMap) else None
    resource = band.get("resource") if isinstance(band, YMap) else None
    name = resource.get("name") if isinstance(resource, YMap) else None
    if isinstance(name, YScalar) and isinstance(plain(name), str):
        return str(plain(name))
    return None


def _matrix_names(hp_node: YNode | None) -> tuple[str, ...]:
    matrix = hp_node.get("matrix") if isinstance(hp_node, YMap) else None
    return tuple(k.name for k, _ in matrix.items) if isinstance(matrix, YMap) else ()


def _command_text(root: YMap) -> str | None:
    run = root.get("run")
    cmd = run.get("cmd") if isinstance(run, YMap) else None
    if cmd is None:
        return None
    value = plain(cmd)
    return " ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _check_used(
    c: Collector, root: YMap, names: tuple[str, ...], resource: str | None, allow_unused: bool
) -> None:
    """A matrix name run.cmd never uses still reaches the script (PHALANX_PARAMS, read by
    ``task.connect()`` / ``task.get_parameters()``, as Polyaxon's corpus files rely on), so it is a
    note. Only a near miss of a placeholder the command does use (`lerning_rate` beside
    ``{{ learning_rate }}``) is an error, unless --allow-unused: that typo would waste the search."""
    text = _command_text(root)
    if text is None:
        return  # no command: read_spec says so
    used = {m.group(1).strip() for m in PLACEHOLDER.finditer(text)}
    hpn = root.get("hptuning")
    wanted = [(n, "hptuning.matrix", "is searched") for n in names]
    if resource:
        wanted.append((resource, "hptuning.hyperband.resource.name", "is hyperband's budget"))
    for name, where, what in wanted:
        if name in used:
            continue
        at = (
            (_matrix_mark(hpn, name) if where == "hptuning.matrix" else _budget_mark(hpn))
            if isinstance(hpn, YMap)
            else root.mark
        )
        path = join(where, name) if where == "hptuning.matrix" else where
        hint = did_you_mean(name, used)
        if hint and not allow_unused:
            c.add(
                at,
                path,
                f"{name!r} {what} but run.cmd never uses {{{{ {name} }}}}{hint} Fix the name, or pass "
                "--allow-unused if the script reads it through task.connect() / PHALANX_PARAMS",
            )
        else:
            c.note(
                at,
                path,
                f"{name!r} {what} but run.cmd never uses {{{{ {name} }}}}{hint}: the script gets it only "
                "through task.connect() / task.get_parameters() (PHALANX_PARAMS)",
            )


def search_space_text(group: GroupSpec) -> str:
    """What `phalanx check` prints for a group: the search and each param's distribution."""
    hp = group.hptuning
    s = hp.search
    lines = [
        f"search: {s.kind}"
        + (
            f" ({s.n_trials} trials)"
            if s.n_trials and s.n_trials == hp.planned_trials()
            else f" ({hp.planned_trials()} trials: the whole grid)"
        )
        + f", concurrency {hp.concurrency}"
        + (f", seed {s.seed}" if s.seed is not None else "")
    ]
    if s.metric:
        lines.append(f"metric: {s.metric.name} ({s.metric.optimization})")
    if s.kind == "hyperband":
        lines.append(f"hyperband: max_iter {s.max_iter}, eta {s.eta}, budget param {{{{ {s.resource} }}}}")
    if hp.pruning and hp.pruning.kind != "hyperband":
        lines.append(
            f"pruning: {hp.pruning.kind} on {hp.pruning.metric.name} ({hp.pruning.metric.optimization})"
        )
    for e in hp.early_stopping:
        lines.append(
            f"early stopping: the group stops when {e.metric}"
            f" {'>=' if e.optimization == 'maximize' else '<='} {e.value:g}"
        )
    lines.append("matrix:")
    width = max(len(d.name) for d in hp.matrix)
    for d in hp.matrix:
        lines.append(f"  {d.name.ljust(width)}  {d.describe()}")
    return "\n".join(lines)


def example_values(group: GroupSpec) -> dict[str, Any]:
    """One trial's values without sampling (the first choice, the low bound, the mean): what
    `phalanx check` shows a trial's topology with."""
    out: dict[str, Any] = {}
    for d in group.hptuning.matrix:
        if d.choices:
            out[d.name] = d.choices[0]
        elif "low" in d.args:
            low = d.args["low"]
            out[d.name] = math.exp(low) if d.kind.endswith("loguniform") else low
        else:
            loc = d.args["loc"]
            out[d.name] = math.exp(loc) if d.kind.endswith("lognormal") else loc
    s = group.hptuning.search
    if s.resource and s.max_iter:
        out[s.resource] = s.max_iter if s.resource_type == "int" else float(s.max_iter)
    return out


def is_group_file(path: str | Path) -> bool:
    """Whether the file says `kind: group` (a cheap look before choosing the reader)."""
    try:
        text = Path(path).read_bytes()[:MAX_FILE_BYTES].decode("utf-8-sig", errors="replace")
    except OSError:
        return False
    return is_group_text(text, str(path))


def is_group_text(text: str, filename: str = "<text>") -> bool:
    """Whether the text says `kind: group` (the server's look at a submitted file)."""
    try:
        root, _ = compose(text[:MAX_FILE_BYTES], filename)
    except (TreeError, Exception):
        return False
    node = root.get("kind") if isinstance(root, YMap) else None
    return isinstance(node, YScalar) and node.value == "group"
