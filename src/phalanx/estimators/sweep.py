"""A sweep over an estimator (Azure's HyperDrive): the same group a `kind: group` file describes.

    from phalanx.estimators import Experiment, PyTorch
    from phalanx.estimators.sweep import (HyperDriveConfig, RandomParameterSampling, MedianStoppingPolicy,
                                          PrimaryMetricGoal, choice, loguniform)
    est = PyTorch("examples/digits-sweep", entry_script="train.py", node_count=2,
                  script_params={"--epochs": 12})
    config = HyperDriveConfig(
        estimator=est,
        hyperparameter_sampling=RandomParameterSampling(
            {"--lr": loguniform(-7, -1), "--hidden": choice(16, 64)}),
        primary_metric_name="accuracy", primary_metric_goal=PrimaryMetricGoal.MAXIMIZE,
        max_total_runs=8, max_concurrent_runs=2, policy=MedianStoppingPolicy(delay_evaluation=3))
    group = Experiment("digits").submit(config)      # a GroupRun
    group.wait_for_completion(); best = group.get_best_run()

``HyperDriveConfig.to_yaml()`` is the group file it runs (`phalanx group run -f` on it is the same
search): a swept flag ``--lr`` becomes the param ``lr`` and ``--lr {{ lr }}`` in the command.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from phalanx.config import Settings
from phalanx.errors import PhalanxError, Problem, SpecError
from phalanx.estimators.estimator import param_name
from phalanx.groups.ending import stop_group
from phalanx.runs import Run
from phalanx.spec.dump import spec_to_dict
from phalanx.spec.group import load_group, load_group_text
from phalanx.store import open_store

if TYPE_CHECKING:
    from phalanx.estimators.estimator import Estimator
    from phalanx.store.base import GroupStore

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class _Dist:
    kind: str  # the Polyaxon distribution name
    args: Any

    def to_matrix(self) -> dict[str, Any]:
        return {self.kind: self.args}


def choice(*options: Any) -> _Dist:
    """One of the values (a single list argument is taken as the values)."""
    values = (
        list(options[0])
        if len(options) == 1 and isinstance(options[0], list | tuple | range)
        else list(options)
    )
    return _Dist("values", values)


def randint(upper: int) -> _Dist:
    """An integer from 0 to upper - 1."""
    return _Dist("range", [0, int(upper), 1])


def uniform(min_value: float, max_value: float) -> _Dist:
    return _Dist("uniform", [min_value, max_value])


def quniform(min_value: float, max_value: float, q: float) -> _Dist:
    return _Dist("quniform", [min_value, max_value, q])


def loguniform(min_value: float, max_value: float) -> _Dist:
    """exp(uniform(min_value, max_value)): the bounds are natural logs, as in Azure and Polyaxon."""
    return _Dist("loguniform", [min_value, max_value])


def qloguniform(min_value: float, max_value: float, q: float) -> _Dist:
    return _Dist("qloguniform", [min_value, max_value, q])


def normal(mu: float, sigma: float) -> _Dist:
    return _Dist("normal", [mu, sigma])


def qnormal(mu: float, sigma: float, q: float) -> _Dist:
    return _Dist("qnormal", [mu, sigma, q])


def lognormal(mu: float, sigma: float) -> _Dist:
    return _Dist("lognormal", [mu, sigma])


def qlognormal(mu: float, sigma: float, q: float) -> _Dist:
    return _Dist("qlognormal", [mu, sigma, q])


class PrimaryMetricGoal(StrEnum):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


@dataclass(frozen=True)
class _Sampling:
    search: str
    space: Mapping[str, _Dist]
    seed: int | None = None


def RandomParameterSampling(space: Mapping[str, _Dist], seed: int | None = None) -> _Sampling:
    return _Sampling("random_search", space, seed)


def GridParameterSampling(space: Mapping[str, _Dist]) -> _Sampling:
    return _Sampling("grid_search", space)


def BayesianParameterSampling(space: Mapping[str, _Dist], seed: int | None = None) -> _Sampling:
    """Optuna's TPE (docs/groups.md): model-guided after a few random trials."""
    return _Sampling("bo", space, seed)


@dataclass(frozen=True)
class MedianStoppingPolicy:
    """Stop a run whose best metric so far is worse than the median of finished runs at that step.
    ``delay_evaluation``: steps before the first decision. (``evaluation_interval`` is accepted: the
    controller evaluates every reported step.)"""

    evaluation_interval: int = 1
    delay_evaluation: int = 0

    def to_pruning(self) -> dict[str, Any]:
        return {"kind": "median", "warmup_steps": self.delay_evaluation}


@dataclass(frozen=True)
class SuccessiveHalvingPolicy:
    """Keep the best 1/reduction_factor of the runs at steps min_resource * reduction_factor**k."""

    min_resource: int = 1
    reduction_factor: int = 3

    def to_pruning(self) -> dict[str, Any]:
        return {
            "kind": "successive_halving",
            "min_resource": self.min_resource,
            "reduction_factor": self.reduction_factor,
        }


class HyperDriveConfig:
    """A hyperparameter search over ``estimator``: what to sample, the metric and its goal, how many
    runs in all and at once, and the early-termination policy. Builds a `kind: group` file."""

    def __init__(
        self,
        *,
        estimator: Estimator,
        hyperparameter_sampling: _Sampling,
        primary_metric_name: str,
        primary_metric_goal: PrimaryMetricGoal | str,
        max_total_runs: int,
        max_concurrent_runs: int = 1,
        policy: MedianStoppingPolicy | SuccessiveHalvingPolicy | None = None,
    ) -> None:
        problems: list[Problem] = []
        if not isinstance(hyperparameter_sampling, _Sampling):
            problems.append(
                Problem(
                    "use RandomParameterSampling, GridParameterSampling or BayesianParameterSampling",
                    "hyperparameter_sampling",
                )
            )
        else:
            for flag, dist in hyperparameter_sampling.space.items():
                if not isinstance(dist, _Dist):
                    problems.append(
                        Problem(f"{flag}: use choice(), uniform(), loguniform(), ...", "parameter_space")
                    )
                elif not _NAME.match(param_name(flag)):
                    problems.append(Problem(f"{flag!r} is not a flag like '--lr'", "parameter_space"))
        try:
            goal = PrimaryMetricGoal(str(primary_metric_goal).lower())
        except ValueError:
            problems.append(Problem("use PrimaryMetricGoal.MAXIMIZE or MINIMIZE", "primary_metric_goal"))
            goal = PrimaryMetricGoal.MINIMIZE
        if not isinstance(max_total_runs, int) or max_total_runs < 1:
            problems.append(Problem("a number of runs, at least 1", "max_total_runs"))
        if not isinstance(max_concurrent_runs, int) or max_concurrent_runs < 1:
            problems.append(Problem("a number of runs at once, at least 1", "max_concurrent_runs"))
        if policy is not None and not isinstance(policy, MedianStoppingPolicy | SuccessiveHalvingPolicy):
            problems.append(
                Problem(
                    f"{type(policy).__name__} is not supported;"
                    " use MedianStoppingPolicy or SuccessiveHalvingPolicy",
                    "policy",
                )
            )
        if problems:
            raise SpecError(problems)
        self.estimator = estimator
        self.sampling = hyperparameter_sampling
        self.metric = primary_metric_name
        self.goal = goal
        self.max_total_runs = max_total_runs
        self.max_concurrent_runs = max_concurrent_runs
        self.policy = policy
        self._check_space()

    def _check_space(self) -> None:
        """Refuse a space the group file would refuse (bounds reversed, a continuous distribution
        in a grid, ...) now, named by the user's flag (`--lr: ...`), not by a line of a YAML file
        the user never wrote (`<HyperDriveConfig>:16:7: hptuning.matrix.lr.uniform: ...`)."""
        flags = {param_name(flag): flag for flag in self.sampling.space}
        try:
            load_group_text(yaml.safe_dump(self.to_dict(), sort_keys=False), "<HyperDriveConfig>")
        except SpecError as exc:
            problems = []
            for p in exc.problems:
                found = re.match(r"hptuning\.matrix\.([A-Za-z0-9_]+)", p.path)
                if found and found.group(1) in flags:
                    message = re.sub(  # the file's advice in this API's words
                        r"\(use values, range, .*\)$",
                        "(use choice(...), or RandomParameterSampling)",
                        p.message,
                    )
                    problems.append(Problem(f"{flags[found.group(1)]}: {message}", "parameter_space"))
                else:
                    problems.append(Problem(p.message, p.path))
            raise SpecError(problems) from None

    def to_dict(self, name: str | None = None, project: str | None = None) -> dict[str, Any]:
        spec = self.estimator.to_spec(name=name, project=project)
        swept = " ".join(f"{flag} {{{{ {param_name(flag)} }}}}" for flag in self.sampling.space)
        sampled = {param_name(flag) for flag in self.sampling.space}  # a swept flag is sampled, not fixed
        spec = replace(
            spec,
            command=(f"{spec.command[0]} {swept}",),
            params={k: v for k, v in spec.params.items() if k not in sampled},
        )
        doc = spec_to_dict(spec)
        doc["kind"] = "group"
        search: dict[str, Any] = {}
        if self.sampling.search == "random_search" or self.sampling.search == "grid_search":
            search = {"n_experiments": self.max_total_runs}
        else:
            search = {
                "n_iterations": self.max_total_runs,
                "metric": {"name": self.metric, "optimization": self.goal.value},
            }
        if self.sampling.seed is not None:
            search["seed"] = self.sampling.seed
        hp: dict[str, Any] = {"concurrency": self.max_concurrent_runs, self.sampling.search: search}
        if self.sampling.search != "bo":
            hp["metric"] = {"name": self.metric, "optimization": self.goal.value}
        if self.policy is not None:
            hp["pruning"] = self.policy.to_pruning()
        hp["matrix"] = {param_name(flag): dist.to_matrix() for flag, dist in self.sampling.space.items()}
        doc["hptuning"] = hp
        return doc

    def to_yaml(self, name: str | None = None, project: str | None = None) -> str:
        """The group file (validated: it loads as `phalanx group run -f` would load it)."""
        text = yaml.safe_dump(self.to_dict(name, project), sort_keys=False)
        load_group_text(text, "<HyperDriveConfig>")
        return text


class GroupRun:
    """A submitted sweep: its status, its child runs, the best one, cancel (read from the store)."""

    def __init__(
        self,
        group_id: str,
        *,
        settings: Settings | None = None,
        _process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.id = group_id
        self._store_obj: GroupStore | None = None
        self._process = _process  # the controller this process started (reaped once it ends)

    @property
    def _store(self) -> GroupStore:
        if self._store_obj is None:
            self._store_obj = open_store(self.settings)
        return self._store_obj

    def get_details(self) -> dict[str, Any]:
        """The group, every trial (experiment id, params, state, metric) and the best one."""
        return self._store.group_view(self.id)

    def get_status(self) -> str:
        if self._process is not None:
            self._process.poll()  # reap it once it ended: no zombie in a long-lived notebook
        return self._store.get_group(self.id).status

    def get_children(self) -> list[Run]:
        return [Run(t["experiment_id"], settings=self.settings) for t in self.get_details()["trials"]]

    def get_best_run(self) -> Run | None:
        best = self.get_details()["best"]
        return Run(best["experiment_id"], settings=self.settings) if best else None

    def wait_for_completion(self, timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.get_status() not in ("succeeded", "stopped", "failed"):
            if deadline is not None and time.monotonic() > deadline:
                raise PhalanxError(f"group {self.id} still running after {timeout:g} s")
            time.sleep(0.5)
        return self.get_details()

    def cancel(self, timeout: float = 60.0) -> str:
        group = self._store.get_group(self.id)
        return stop_group(self._store, self.settings, group, timeout=timeout).status

    def __repr__(self) -> str:
        return f"GroupRun(id={self.id!r})"


def submit_sweep(config: HyperDriveConfig, name: str, project: str | None, settings: Settings) -> GroupRun:
    """Record the sweep's group and start its controller, as `phalanx group run --detach` does
    (``GroupLauncher``, the one way a group starts). Its group file is kept under the home's
    sweeps/ folder: `phalanx group run -f` on it runs the same search again."""
    from phalanx.groups.launching import GroupLauncher, GroupOptions  # why: `import phalanx`: no controller

    folder = settings.home / "sweeps"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{time.time_ns()}.yml"
    path.write_text(config.to_yaml(name=name, project=project))
    try:
        group = load_group(path)  # as `phalanx group run -f` reads it (to_yaml validated it already)
        options = GroupOptions(workdir=Path(config.estimator.source_directory))
        started = GroupLauncher(settings).submit(group, options)
    except BaseException:
        path.unlink(missing_ok=True)  # nothing recorded: no file of a sweep that never was
        raise
    return GroupRun(started.group.id, settings=settings, _process=started.process)


__all__ = [
    "BayesianParameterSampling",
    "GridParameterSampling",
    "GroupRun",
    "HyperDriveConfig",
    "MedianStoppingPolicy",
    "PrimaryMetricGoal",
    "RandomParameterSampling",
    "SuccessiveHalvingPolicy",
    "choice",
    "lognormal",
    "loguniform",
    "normal",
    "qlognormal",
    "qloguniform",
    "qnormal",
    "quniform",
    "randint",
    "uniform",
]
