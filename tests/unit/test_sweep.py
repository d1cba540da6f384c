"""A sweep over an estimator (HyperDriveConfig) builds the same group a `kind: group` file does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from phalanx.errors import SpecError
from phalanx.estimators import PyTorch
from phalanx.estimators.sweep import (
    BayesianParameterSampling,
    GridParameterSampling,
    MedianStoppingPolicy,
    PrimaryMetricGoal,
    RandomParameterSampling,
    choice,
    loguniform,
    randint,
)
from phalanx.plan import build_plan
from phalanx.spec.group import load_group_text


def estimator(tmp_path: Path) -> PyTorch:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return PyTorch(
        str(tmp_path),
        entry_script="train.py",
        node_count=2,
        distributed_backend="gloo",
        script_params={"--epochs": 3},
    )


def test_a_random_sweep_is_the_group_file_with_the_swept_flags_as_placeholders(tmp_path: Path) -> None:
    from phalanx.estimators.sweep import HyperDriveConfig

    config = HyperDriveConfig(
        estimator=estimator(tmp_path),
        hyperparameter_sampling=RandomParameterSampling(
            {"--lr": loguniform(-7, -1), "--hidden-size": choice(16, 64), "--seed": randint(3)}, seed=5
        ),
        primary_metric_name="accuracy",
        primary_metric_goal=PrimaryMetricGoal.MAXIMIZE,
        max_total_runs=6,
        max_concurrent_runs=2,
        policy=MedianStoppingPolicy(delay_evaluation=2),
    )
    text = config.to_yaml(name="s", project="p")
    doc = yaml.safe_load(text)
    assert doc["kind"] == "group"
    assert doc["hptuning"]["random_search"] == {"n_experiments": 6, "seed": 5}
    group = load_group_text(text, "sweep.yml")
    hp = group.hptuning
    assert [d.name for d in hp.matrix] == ["lr", "hidden_size", "seed"]
    assert hp.concurrency == 2 and hp.metric is not None and hp.metric.maximize
    assert hp.pruning is not None and (hp.pruning.kind, hp.pruning.warmup_steps) == ("median", 2)
    plan = build_plan(group.trial_spec({"lr": 0.01, "hidden_size": 16, "seed": 1}))
    assert plan.command == "python train.py --epochs 3 --lr 0.01 --hidden-size 16 --seed 1"
    assert plan.topology()["worker"] == 1


def test_grid_and_bayesian_sampling_map_to_grid_search_and_bo(tmp_path: Path) -> None:
    from phalanx.estimators.sweep import HyperDriveConfig

    grid = HyperDriveConfig(
        estimator=estimator(tmp_path),
        hyperparameter_sampling=GridParameterSampling({"--lr": choice(0.1, 0.01)}),
        primary_metric_name="loss",
        primary_metric_goal="minimize",
        max_total_runs=2,
    )
    assert load_group_text(grid.to_yaml(), "g.yml").hptuning.search.kind == "grid"
    bo = HyperDriveConfig(
        estimator=estimator(tmp_path),
        hyperparameter_sampling=BayesianParameterSampling({"--lr": loguniform(-5, -1)}),
        primary_metric_name="loss",
        primary_metric_goal="minimize",
        max_total_runs=4,
    )
    hp = load_group_text(bo.to_yaml(), "b.yml").hptuning
    assert hp.search.kind == "bo" and hp.planned_trials() == 4


def test_a_bad_sweep_names_every_parameter_to_fix(tmp_path: Path) -> None:
    from phalanx.estimators.sweep import HyperDriveConfig

    with pytest.raises(SpecError) as err:
        HyperDriveConfig(
            estimator=estimator(tmp_path),
            hyperparameter_sampling=RandomParameterSampling({"--lr": 0.1}),  # type: ignore[dict-item]
            primary_metric_name="loss",
            primary_metric_goal="lowest",
            max_total_runs=0,
        )
    assert [p.path for p in err.value.problems] == [
        "parameter_space",
        "primary_metric_goal",
        "max_total_runs",
    ]


def test_a_bad_space_is_refused_when_the_config_is_built_named_by_its_flag(tmp_path: Path) -> None:
    """Bounds reversed or a grid over a continuous distribution: said at HyperDriveConfig(...) with the
    user's flag, not later by to_yaml()/submit() with a line of a YAML file the user never wrote."""
    from phalanx.estimators.sweep import HyperDriveConfig, uniform

    def config(sampling: object) -> None:
        HyperDriveConfig(
            estimator=estimator(tmp_path),
            hyperparameter_sampling=sampling,  # type: ignore[arg-type]
            primary_metric_name="loss",
            primary_metric_goal=PrimaryMetricGoal.MINIMIZE,
            max_total_runs=3,
        )

    with pytest.raises(SpecError) as err:
        config(RandomParameterSampling({"--lr": uniform(1, 0)}))
    (problem,) = err.value.problems
    assert str(problem) == "parameter_space: --lr: bounds reversed or equal: low 1 must be below high 0"
    with pytest.raises(SpecError) as err:
        config(GridParameterSampling({"--lr": uniform(0, 1), "--hidden": choice(16, 64)}))
    (problem,) = err.value.problems
    assert str(problem) == (
        "parameter_space: --lr: grid_search needs a list of values; uniform is continuous"
        " (use choice(...), or RandomParameterSampling)"
    )
    assert "<HyperDriveConfig>" not in str(err.value)
