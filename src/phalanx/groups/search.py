"""The search space as Optuna calls: samplers, pruners, and each Polyaxon distribution.

Optuna (the `search` extra) is imported only here, by the controller; `phalanx check` and the CLI's
start-up never import it. Mapping (docs/groups.md says the same):

- grid_search -> GridSampler over the discrete values; random_search -> RandomSampler;
  bo -> TPESampler (n_initial_trials random trials first); hyperband -> RandomSampler + HyperbandPruner.
- values/range/linspace/logspace/geomspace -> suggest_categorical over the listed values;
  uniform, quniform -> suggest_float(low, high) (q: rounded to a multiple of q);
  loguniform, qloguniform -> suggest_float(exp(low), exp(high), log=True) (Polyaxon's bounds are logs);
  normal, qnormal, lognormal, qlognormal, pvalues -> a uniform u in (0, 1) mapped through the inverse
  CDF (normal) or the cumulative probabilities (pvalues): exact under random sampling, and TPE models u.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist
from typing import Any

from phalanx.extras import require
from phalanx.spec.group import Distribution, HPTuning, Pruning

_EPS = 1e-9


def optuna() -> Any:
    return require("optuna", "search", "phalanx group run")


def make_study(hp: HPTuning, name: str, resumed_after: int = 0) -> Any:
    """An in-memory study: the store is the record; a resumed controller replays it (``replay``).

    ``resumed_after``: trials already recorded. A replayed trial does not advance the sampler's
    random state, so a resumed random search would draw its first values again; its seed is moved
    on by that count instead (still reproducible for the same history).
    """
    op = optuna()
    op.logging.set_verbosity(op.logging.WARNING)
    s = hp.search
    if s.seed is not None and resumed_after:
        s = replace(s, seed=s.seed + 7919 * resumed_after)
    elif resumed_after:
        s = replace(s, seed=None)
    direction = "maximize" if (hp.metric and hp.metric.maximize) else "minimize"
    if s.kind == "grid":
        space = {d.name: list(d.choices) for d in hp.matrix}
        sampler = op.samplers.GridSampler(space, seed=s.seed)
    elif s.kind == "bo":
        startup = s.n_initial_trials if s.n_initial_trials is not None else 5
        sampler = op.samplers.TPESampler(n_startup_trials=max(startup, 1), seed=s.seed)
    else:
        sampler = op.samplers.RandomSampler(seed=s.seed)
    return op.create_study(
        study_name=name, direction=direction, sampler=sampler, pruner=make_pruner(hp.pruning)
    )


def make_pruner(p: Pruning | None) -> Any:
    op = optuna()
    if p is None:
        return op.pruners.NopPruner()
    if p.kind == "median":
        return op.pruners.MedianPruner(n_startup_trials=p.min_trials, n_warmup_steps=p.warmup_steps)
    if p.kind == "successive_halving":
        return op.pruners.SuccessiveHalvingPruner(
            min_resource=p.min_resource, reduction_factor=p.reduction_factor
        )
    return op.pruners.HyperbandPruner(
        min_resource=p.min_resource,
        max_resource=p.max_resource or "auto",
        reduction_factor=p.reduction_factor,
    )


def distributions(hp: HPTuning) -> dict[str, Any]:
    """What each param's Optuna value is drawn from (needed to replay finished trials)."""
    op = optuna()
    grid = hp.search.kind == "grid"
    out: dict[str, Any] = {}
    for d in hp.matrix:
        if d.kind == "pvalues" and not grid:
            out[d.name] = op.distributions.FloatDistribution(0.0, 1.0)
        elif d.discrete:
            out[d.name] = op.distributions.CategoricalDistribution(list(d.choices))
        elif d.kind in ("uniform", "quniform"):
            out[d.name] = op.distributions.FloatDistribution(d.args["low"], d.args["high"])
        elif d.kind in ("loguniform", "qloguniform"):
            out[d.name] = op.distributions.FloatDistribution(
                math.exp(d.args["low"]), math.exp(d.args["high"]), log=True
            )
        else:
            out[d.name] = op.distributions.FloatDistribution(_EPS, 1 - _EPS)
    return out


def sample(trial: Any, hp: HPTuning) -> dict[str, Any]:
    """The trial's values, as the experiment receives them in {{ name }} and records as params."""
    dists = distributions(hp)
    out: dict[str, Any] = {}
    for d in hp.matrix:
        dist = dists[d.name]
        if d.discrete and not (d.kind == "pvalues" and hp.search.kind != "grid"):
            raw = trial.suggest_categorical(d.name, list(d.choices))
        else:
            raw = trial.suggest_float(d.name, dist.low, dist.high, log=dist.log)
        out[d.name] = value_of(d, raw, hp.search.kind == "grid")
    return out


def value_of(d: Distribution, raw: Any, grid: bool = False) -> Any:
    """Optuna's value for ``d`` -> the param value (quantised, transformed)."""
    if d.kind == "pvalues" and not grid:
        total = 0.0
        for choice, weight in zip(d.choices, d.weights, strict=True):
            total += weight
            if raw < total:
                return choice
        return d.choices[-1]
    if d.discrete:
        return raw
    a = d.args
    if d.kind in ("uniform", "loguniform"):
        return _clean(raw)
    if d.kind in ("quniform", "qloguniform"):
        return _q(raw, a)
    x = a["loc"] + a["scale"] * NormalDist().inv_cdf(min(max(raw, _EPS), 1 - _EPS))
    if d.kind.endswith("lognormal"):
        x = math.exp(x)
    return _q(x, a) if d.kind.startswith("q") else _clean(x)


def _q(x: float, a: Any) -> float | int:
    q = a["q"]
    v = round(x / q) * q
    ints = float(q).is_integer() and all(float(a[k]).is_integer() for k in ("low", "high") if k in a)
    return round(v) if ints else _clean(v)


def _clean(v: float) -> float:
    return float(f"{float(v):.12g}")


def replay(
    study: Any,
    hp: HPTuning,
    params: dict[str, Any],
    state: str,
    value: float | None,
    intermediate: dict[int, float],
) -> None:
    """Add a trial recorded in the store (a resumed controller's past) to a fresh study."""
    op = optuna()
    dists = distributions(hp)
    states = {"done": op.trial.TrialState.COMPLETE, "pruned": op.trial.TrialState.PRUNED}
    st = states.get(state, op.trial.TrialState.FAIL)
    if st is op.trial.TrialState.COMPLETE and value is None:
        st = op.trial.TrialState.FAIL
    frozen = op.trial.create_trial(
        params={k: v for k, v in params.items() if k in dists},
        distributions={k: v for k, v in dists.items() if k in params},
        value=value if st is op.trial.TrialState.COMPLETE else None,
        intermediate_values={int(k): float(v) for k, v in intermediate.items() if math.isfinite(v)},
        state=st,
    )
    study.add_trial(frozen)


def tell(study: Any, trial: Any, value: float | None = None, state: Any = None) -> None:
    """study.tell, ignoring GridSampler's `study.stop()` once the grid is covered: outside
    study.optimize() that raises, after the trial's result has been stored (the controller knows
    the grid's size and stops launching by itself)."""
    try:
        if state is None:
            study.tell(trial, value)
        else:
            study.tell(trial, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise
