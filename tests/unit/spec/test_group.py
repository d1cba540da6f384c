"""Group files (kind: group with hptuning): the four corpus groups load, every Polyaxon distribution
is read in both forms, and mistakes are located (FILE:LINE:COL: key.path: what, how to fix)."""

from __future__ import annotations

import math

import pytest

from phalanx.errors import SpecError
from phalanx.plan import build_plan
from phalanx.spec.group import (
    example_values,
    hyperband_trials,
    load_group,
    load_group_text,
    search_space_text,
)
from tests.conftest import CORPUS

GROUPS = CORPUS / "polyaxonfiles"

HEAD = "version: 1\nkind: group\n"
RUN = "run:\n  cmd: python t.py --lr={{ lr }}\n"


def problems(text: str, **kw: object) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_group_text(text, "g.yml", **kw)  # type: ignore[arg-type]
    return [str(p) for p in err.value.problems]


def group(hptuning: str, run: str = RUN) -> str:
    return HEAD + "hptuning:\n" + hptuning + run


def test_the_corpus_groups_load_and_one_trial_plans() -> None:
    keras = load_group(GROUPS / "keras__mnist__polyaxonfile_hyperparams.yml")
    assert keras.hptuning.search.kind == "random" and keras.hptuning.planned_trials() == 50
    assert keras.hptuning.concurrency == 5
    kinds = {d.name: d.kind for d in keras.hptuning.matrix}
    assert kinds["optimizer"] == "pvalues" and kinds["dropout"] == "uniform"
    hidden = next(d for d in keras.hptuning.matrix if d.name == "hidden1_size")
    assert hidden.choices == tuple(range(10, 600, 50))
    assert any("keras" in n for n in keras.notes)  # framework: keras is one process, said as a note

    bo = load_group(GROUPS / "fixtures__typing__test_parallel_distributed.yaml")
    assert bo.hptuning.search.kind == "bo" and bo.hptuning.planned_trials() == 15
    assert bo.hptuning.metric is not None and bo.hptuning.metric.name == "loss"
    assert bo.base.params["batch_size"] == 8  # Polyaxon 0.6 inputs: their defaults are params
    assert any("utility_function" in n for n in bo.notes)
    plan = build_plan(bo.trial_spec(example_values(bo)))
    assert plan.topology()["worker"] == 1 and "{{" not in plan.command

    torch = load_group(GROUPS / "pytorch__mnist__polyaxonfile_hyperparams.yml")
    lr = torch.hptuning.matrix[0]
    assert lr.kind == "linspace" and lr.choices == (0.001, 0.02575, 0.0505, 0.07525, 0.1)
    assert "linspace" in search_space_text(torch)


def test_a_corpus_group_whose_script_reads_a_searched_name_itself_loads_with_a_note() -> None:
    """Polyaxon's cifar10 group searches `num_layers` that run.cmd never names: its script reads it
    through the client, as a Phalanx script does through task.connect() / PHALANX_PARAMS."""
    path = GROUPS / "tensorflow__cifar10__polyaxonfile_hyperparams.yml"
    loaded = load_group(path)
    (note,) = [n for n in loaded.notes if "num_layers" in n]
    assert note.startswith(f"{path}:18:5: hptuning.matrix.num_layers:") and "task.connect()" in note
    plan = build_plan(loaded.trial_spec(example_values(loaded)))
    assert plan.params["num_layers"] == 44  # recorded and handed to the replicas (PHALANX_PARAMS)


def test_a_searched_name_that_is_a_near_miss_of_a_placeholder_is_a_located_error() -> None:
    text = (
        "version: 1\nkind: group\n"
        "hptuning:\n  random_search: {n_experiments: 2}\n  matrix:\n    lerning_rate: {uniform: 0:1}\n"
        "declarations: {learning_rate: 0.1}\n"
        "run:\n  cmd: python train.py --lr={{ learning_rate }}\n"
    )
    with pytest.raises(SpecError) as err:
        load_group_text(text, "typo.yml")
    (p,) = err.value.problems
    assert (p.line, p.path) == (6, "hptuning.matrix.lerning_rate")
    assert "did you mean 'learning_rate'?" in p.message and "--allow-unused" in p.message
    loaded = load_group_text(text, "typo.yml", allow_unused=True)
    assert any("lerning_rate" in n for n in loaded.notes)


@pytest.mark.parametrize(
    ("text", "kind", "args"),
    [
        ("{uniform: 0:1}", "uniform", {"low": 0, "high": 1}),
        ("{uniform: [0, 1]}", "uniform", {"low": 0, "high": 1}),
        ("{uniform: {low: 0, high: 1}}", "uniform", {"low": 0, "high": 1}),
        ("{quniform: 0:10:2}", "quniform", {"low": 0, "high": 10, "q": 2}),
        ("{loguniform: [-7, -1]}", "loguniform", {"low": -7, "high": -1}),
        ("{qloguniform: '-7:-1:0.001'}", "qloguniform", {"low": -7, "high": -1, "q": 0.001}),
        ("{normal: 0:1}", "normal", {"loc": 0, "scale": 1}),
        ("{qnormal: [0, 1, 0.5]}", "qnormal", {"loc": 0, "scale": 1, "q": 0.5}),
        ("{lognormal: '0:1'}", "lognormal", {"loc": 0, "scale": 1}),
        ("{qlognormal: [0, 1, 1]}", "qlognormal", {"loc": 0, "scale": 1, "q": 1}),
    ],
)
def test_continuous_distributions_in_list_string_and_mapping_form(text: str, kind: str, args: dict) -> None:
    g = load_group_text(group(f"  random_search: {{n_experiments: 2}}\n  matrix:\n    lr: {text}\n"), "g.yml")
    (d,) = g.hptuning.matrix
    assert (d.kind, dict(d.args)) == (kind, args)


def test_discrete_distributions_list_their_values() -> None:
    text = group(
        "  grid_search: {}\n  matrix:\n"
        "    lr: {logspace: '-3:-1:3'}\n    a: {geomspace: [1, 100, 3]}\n"
        "    b: {range: [0, 1, 0.25]}\n    c: {values: [x, 1, true]}\n"
        "    d: {pvalues: [[a, 0.25], [b, 0.75]]}\n",
        run="run:\n  cmd: t {{ lr }} {{ a }} {{ b }} {{ c }} {{ d }}\n",
    )
    g = load_group_text(text, "g.yml")
    lr, a, b, c, d = g.hptuning.matrix
    assert lr.choices == (0.001, 0.01, 0.1)
    assert a.choices == (1.0, 10.0, 100.0)
    assert b.choices == (0.0, 0.25, 0.5, 0.75)
    assert c.choices == ("x", 1, True)
    assert d.choices == ("a", "b") and d.weights == (0.25, 0.75)
    assert g.hptuning.planned_trials() == 3 * 3 * 4 * 3 * 2  # the whole grid


def test_bad_groups_are_located_with_the_fix() -> None:
    found = problems(
        group(
            "  random_search: {n_experiments: 4}\n  matrix:\n"
            "    lr: {unifrom: 0:1}\n"  # line 6
            "    m: {uniform: 1:0}\n"  # line 7
            "    q: {linspace: 0:1:x}\n",  # line 8
            run="run:\n  cmd: t {{ lr }} {{ m }} {{ q }}\n",
        )
    )
    assert found[0].startswith("g.yml:6:10: hptuning.matrix.lr.unifrom: unknown distribution 'unifrom';")
    assert "did you mean 'uniform'?" in found[0]
    assert found[1] == (
        "g.yml:7:18: hptuning.matrix.m.uniform: bounds reversed or equal: low 1 must be below high 0"
    )
    assert found[2].startswith("g.yml:8:19: hptuning.matrix.q.linspace: num 'x' is not a number")


def test_hyperband_and_bo_need_a_metric() -> None:
    hb = problems(
        group(
            "  hyperband: {max_iter: 9, eta: 3, resource: {name: epochs, type: int}}\n"
            "  matrix:\n    lr: {uniform: 0:1}\n",
            run="run:\n  cmd: t {{ lr }} {{ epochs }}\n",
        )
    )
    assert hb == [
        "g.yml:4:14: hptuning.hyperband.metric: missing; hyperband needs metric:"
        " {name: loss, optimization: minimize}"
    ]
    bo = problems(group("  bo: {n_iterations: 5}\n  matrix:\n    lr: {uniform: 0:1}\n"))
    assert bo == [
        "g.yml:4:7: hptuning.bo.metric: missing; bo needs metric: {name: loss, optimization: minimize}"
    ]


def test_hyperband_budget_param_and_trial_count() -> None:
    g = load_group_text(
        group(
            "  hyperband:\n    max_iter: 9\n    eta: 3\n    resource: {name: epochs, type: int}\n"
            "    metric: {name: loss, optimization: minimize}\n  matrix:\n    lr: {uniform: 0:1}\n",
            run="run:\n  cmd: t {{ lr }} {{ epochs }}\n",
        ),
        "g.yml",
    )
    assert g.hptuning.search.resource == "epochs"
    assert g.hptuning.pruning is not None and g.hptuning.pruning.kind == "hyperband"
    assert g.hptuning.planned_trials() == hyperband_trials(9, 3) == 9 + 5 + 3
    assert example_values(g)["epochs"] == 9


def test_grid_search_refuses_continuous_and_pruning_reads_its_metric() -> None:
    found = problems(group("  grid_search: {}\n  matrix:\n    lr: {uniform: 0:1}\n"))
    assert found == [
        "g.yml:6:5: hptuning.matrix.lr: grid_search needs a list of values; uniform is continuous"
        " (use values, range, linspace, logspace or geomspace, or random_search)"
    ]
    g = load_group_text(
        group(
            "  random_search: {n_experiments: 3}\n  metric: {name: acc, optimization: maximize}\n"
            "  pruning: {kind: median, warmup_steps: 5}\n"
            "  early_stopping: [{metric: acc, value: 0.99, optimization: maximize}]\n"
            "  matrix:\n    lr: {uniform: 0:1}\n"
        ),
        "g.yml",
    )
    assert g.hptuning.pruning is not None
    assert (g.hptuning.pruning.kind, g.hptuning.pruning.metric.name) == ("median", "acc")
    assert g.hptuning.early_stopping[0].reached(0.995)
    bad = problems(
        group(
            "  random_search: {n_experiments: 3}\n  pruning: {kind: medain}\n"
            "  matrix:\n    lr: {uniform: 0:1}\n"
        )
    )
    assert bad[0].startswith(
        "g.yml:5:19: hptuning.pruning.kind: unknown pruner 'medain'; did you mean 'median'?"
    )


def test_trial_spec_fills_the_sampled_values() -> None:
    g = load_group_text(
        group("  random_search: {n_experiments: 1}\n  matrix:\n    lr: {loguniform: [-5, 0]}\n"), "g.yml"
    )
    values = example_values(g)
    assert math.isclose(values["lr"], math.exp(-5))
    plan = build_plan(g.trial_spec({"lr": 0.01}))
    assert plan.command == "python t.py --lr=0.01"


def test_loguniform_bounds_written_as_the_values_meant_get_a_note_with_the_logs_to_write() -> None:
    """`loguniform: [0.0001, 0.1]` draws from e^0.0001 to e^0.1 (1.0001..1.105): the bounds are
    natural logs. A tired user meant the learning rate 0.0001..0.1, so `check` says what to write."""
    loaded = load_group_text(
        group(
            "  random_search: {n_experiments: 2}\n  matrix:\n"
            "    lr: {loguniform: [0.0001, 0.1]}\n    m: {qloguniform: '0.01:1:0.01'}\n",
            run="run:\n  cmd: python t.py --lr={{ lr }} --m={{ m }}\n",
        ),
        "g.yml",
    )
    lr, m = [n for n in loaded.notes if "natural logs" in n]
    assert lr.startswith("g.yml:6:22: hptuning.matrix.lr.loguniform: the bounds are natural logs")
    assert "exp(0.1) = 1.105" in lr and "write loguniform: [-9.21, -2.303]" in lr
    assert "write qloguniform: [-4.605, 0, 0.01]" in m
    usual = load_group_text(
        group("  random_search: {n_experiments: 2}\n  matrix:\n    lr: {loguniform: [-7, -1]}\n"), "g.yml"
    )
    assert not [n for n in usual.notes if "natural logs" in n]  # the usual negative logs: no note


def test_a_param_override_of_a_searched_name_is_a_located_error() -> None:
    """`phalanx group run --param lr=0.01` on a group that searches lr: every trial would have used
    the sampled lr, the user's value silently lost. The same for hyperband's budget param."""
    (lr,) = problems(
        group("  random_search: {n_experiments: 2}\n  matrix:\n    lr: {uniform: 0:1}\n"), params={"lr": 0.01}
    )
    assert lr.startswith("g.yml:6:5: hptuning.matrix.lr: --param lr=0.01 sets a name the search samples")
    assert "drop --param lr=0.01, or remove lr from the matrix" in lr
    hyperband = group(
        "  hyperband:\n    max_iter: 9\n    eta: 3\n    resource: {name: epochs, type: int}\n"
        "    metric: {name: loss, optimization: minimize}\n  matrix:\n    lr: {uniform: 0:1}\n",
        run="run:\n  cmd: t {{ lr }} {{ epochs }}\n",
    )
    (epochs,) = problems(hyperband, params={"epochs": 3})
    assert epochs.startswith(
        "g.yml:4:3: hptuning.hyperband.resource: --param epochs=3 sets hyperband's budget"
    )
    # a name neither searched, declared nor used: refused as by `phalanx run`, unless --extra-params
    (batch,) = problems(hyperband, params={"batch": 64})
    assert batch.startswith("--param batch: the file neither declares a param 'batch'")
    other = load_group_text(hyperband, "g.yml", params={"batch": 64}, extra_params=True)
    assert other.base.params["batch"] == 64


def test_grid_n_experiments_beyond_the_grid_runs_each_combination_once() -> None:
    """`grid_search: {n_experiments: 50}` over 5 values is "at most 50": 5 trials, not 45 repeats."""
    g = load_group_text(
        group("  grid_search: {n_experiments: 50}\n  matrix:\n    lr: {values: [1, 2, 3, 4, 5]}\n"), "g.yml"
    )
    assert g.hptuning.planned_trials() == 5
    assert search_space_text(g).startswith("search: grid (5 trials: the whole grid)")
    fewer = load_group_text(
        group("  grid_search: {n_experiments: 2}\n  matrix:\n    lr: {values: [1, 2, 3]}\n"), "g.yml"
    )
    assert fewer.hptuning.planned_trials() == 2 and search_space_text(fewer).startswith(
        "search: grid (2 trials)"
    )


def test_an_unused_hyperband_budget_name_is_located_at_its_resource_name() -> None:
    text = (
        "version: 1\nkind: group\nhptuning:\n  hyperband:\n    max_iter: 9\n    eta: 3\n"
        "    resource: {name: epoch, type: int}\n    metric: {name: loss, optimization: minimize}\n"
        "  matrix:\n    lr: {values: [0.1, 0.2]}\nrun:\n  cmd: python train.py --lr={{ lr }}\n"
    )
    group = load_group_text(text, "hb.yml")
    (note,) = [n for n in group.notes if "budget" in n]
    assert note.startswith("hb.yml:7:22: hptuning.hyperband.resource.name: 'epoch' is hyperband's budget")


def test_an_early_stopping_metric_one_typo_from_the_searched_one_is_an_error() -> None:
    """`early_stopping: [{metric: scor, ...}]` beside `metric: {name: score}` was accepted: no trial
    reports `scor`, so early stopping never fired and the group ran every trial."""
    hp = (
        "  random_search: {n_experiments: 2}\n  metric: {name: score, optimization: maximize}\n"
        "  early_stopping:\n    - {metric: %s, value: 5, optimization: maximize}\n"
        "  matrix:\n    lr: {uniform: 0:1}\n"
    )
    (typo,) = problems(group(hp % "scor"))
    assert typo.startswith("g.yml:7:16: hptuning.early_stopping[0].metric: 'scor' is not the metric")
    assert "did you mean 'score'?" in typo and typo.endswith("; fix the name")
    qualified = load_group_text(group(hp % "val_score"), "g.yml")  # may be meant: a note
    assert any("'val_score' is not the metric the search reads" in n for n in qualified.notes)
    other = load_group_text(group(hp % "accuracy"), "g.yml")  # another metric altogether: fine
    assert other.notes == ()


def test_a_wrong_distribution_in_a_hyperband_group_does_not_make_its_budget_placeholder_unknown() -> None:
    """One mistake in the matrix used to bring a second, false one: `{{ epochs }}` (hyperband's
    budget) 'unknown placeholder', since the budget name was lost with the invalid hptuning."""
    text = group(
        "  hyperband:\n    max_iter: 9\n    eta: 3\n    resource: {name: epochs, type: int}\n"
        "    metric: {name: loss, optimization: minimize}\n  matrix:\n    lr: {uniform: 1:0}\n",
        run="run:\n  cmd: t {{ lr }} {{ epochs }}\n",
    )
    (only,) = problems(text)
    assert "hptuning.matrix.lr.uniform: bounds reversed or equal" in only


def test_a_group_without_a_search_runs_its_whole_grid_as_polyaxons_did() -> None:
    """Polyaxon 0.x: "grid search is the default algorithm used in case no other is defined"."""
    g = load_group_text(group("  concurrency: 2\n  matrix:\n    lr: {values: [0.01, 0.05, 0.1]}\n"), "g.yml")
    assert (g.hptuning.search.kind, g.hptuning.search.n_trials) == ("grid", None)  # every point
    assert g.hptuning.concurrency == 2
    found = problems(group("  matrix:\n    lr: {uniform: 0:1}\n"))
    assert found == [
        "g.yml:5:5: hptuning.matrix.lr: grid_search (the search when none is given) needs a list of values;"
        " uniform is continuous (use values, range, linspace, logspace or geomspace, or random_search)"
    ]


def test_data_inputs_in_a_group_are_one_problem_saying_trials_do_not_read_them() -> None:
    """`inputs:` naming a dataset was read as Polyaxon's typed inputs: "dataset: unknown key" and
    "has no default; pass --param d=VALUE" for each, which sent the user after the wrong fix."""
    inputs = "inputs:\n  - {name: d, dataset: digits@1}\n  - {name: r, datastore: lake, mode: mount}\n"
    found = problems(HEAD + inputs + "hptuning:\n  matrix:\n    lr: {values: [0.1, 0.2]}\n" + RUN)
    assert found == [
        "g.yml:4:3: inputs: a group's trials do not read data inputs (dataset: or datastore:, an"
        " experiment file's inputs); give the data's folder as a param instead"
        " (params: {data: /path/to/data})"
    ]
