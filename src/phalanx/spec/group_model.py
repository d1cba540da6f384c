"""A group's search as plain data: distributions, the search algorithm, early stopping, pruning
(what ``spec.group`` reads and ``groups.search`` turns into Optuna calls)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.domain import plural
from phalanx.spec.model import ExperimentSpec

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
# how a chart's axis shows a param sampled so (values/pvalues: as their values read)
LOG_SAMPLED = ("loguniform", "qloguniform", "lognormal", "qlognormal", "logspace", "geomspace")
LINEAR_SAMPLED = ("uniform", "quniform", "normal", "qnormal", "linspace", "range")
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

    @property
    def axis(self) -> str | None:
        """ "log" or "linear": the axis a chart of this param's values wants (a log-sampled lr, a
        uniform dropout); None for a list of values, whose axis follows what the values are."""
        return "log" if self.kind in LOG_SAMPLED else "linear" if self.kind in LINEAR_SAMPLED else None

    def describe(self) -> str:
        if self.kind == "values":
            return f"values {list(self.choices)}"
        if self.kind == "pvalues":
            return "pvalues " + ", ".join(
                f"{c}: {w:g}" for c, w in zip(self.choices, self.weights, strict=True)
            )
        shown = ", ".join(f"{k}={_num(v)}" for k, v in self.args.items())
        extra = f" -> {plural(len(self.choices), 'value')}" if self.discrete else ""
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


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"
