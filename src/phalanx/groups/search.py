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

import hashlib
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

from phalanx.config import sqlite_url
from phalanx.extras import require
from phalanx.spec.group import Distribution, HPTuning, Pruning

_EPS = 1e-9


def optuna() -> Any:
    """The optuna module, or a UsageError naming the `search` extra."""
    return require("optuna", "search", "phalanx group run")


def open_study(hp: HPTuning, name: str, storage: Any, seed: int) -> Any:
    """The group's study in ``storage`` (made the first time, loaded after): what a resumed
    controller continues, trials, intermediate values and all, with nothing replayed."""
    op = optuna()
    op.logging.set_verbosity(op.logging.WARNING)
    direction = "maximize" if (hp.metric and hp.metric.maximize) else "minimize"
    return op.create_study(
        study_name=name,
        storage=storage,
        load_if_exists=True,
        direction=direction,
        sampler=sampler_for(hp, seed, 0),
        pruner=make_pruner(hp.pruning),
    )


def study_storage(folder: Path) -> Any:
    """Optuna's RDB storage in its own SQLite file in the group's folder (``study.sqlite``): the
    study outlives the controller (docs/groups.md says why this and not the Phalanx store)."""
    op = optuna()
    folder.mkdir(parents=True, exist_ok=True)
    return op.storages.RDBStorage(sqlite_url(folder / "study.sqlite"))


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial ``number``'s sampling: a function of the group's seed and the number only,
    so a resumed controller draws what the one it replaces would have drawn (no state to save)."""
    import numpy as np  # why: numpy comes with the search extra (Optuna's)

    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


def group_seed(search_seed: int | None, group_id: str) -> int:
    """The file's seed, else one derived from the group id (fixed for the group's life)."""
    if search_seed is not None:
        return search_seed
    return int.from_bytes(hashlib.sha256(group_id.encode()).digest()[:4], "big")


def sampler_for(hp: HPTuning, seed: int, number: int) -> Any:
    """The sampler that draws trial ``number``: a fresh one seeded by ``trial_seed``. The grid's
    order is shuffled by the group's seed alone (a grid id must name the same combination for every
    trial); its pick among the unvisited ids is then a function of what was visited."""
    op = optuna()
    s = hp.search
    if s.kind == "grid":
        space = {d.name: list(d.choices) for d in hp.matrix}
        return op.samplers.GridSampler(space, seed=seed)
    if s.kind == "bo":
        startup = s.n_initial_trials if s.n_initial_trials is not None else 5
        return op.samplers.TPESampler(n_startup_trials=max(startup, 1), seed=trial_seed(seed, number))
    return op.samplers.RandomSampler(seed=trial_seed(seed, number))


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
    """Add a trial recorded in the store to an empty study: only for a group recorded by a Phalanx
    that did not keep its study (``core.Search.restore``)."""
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
    the grid's size and stops launching by itself). A trial already finished in the study (told
    by a controller killed before it recorded the outcome in the store) is left as it is."""
    try:
        if state is None:
            study.tell(trial, value, skip_if_finished=True)
        else:
            study.tell(trial, state=state, skip_if_finished=True)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise
