"""The real-world corpus (25 Polyaxon files, tests/data/corpus/polyaxonfiles): every `kind: experiment`
file loads, both layouts included; real mistakes and other kinds get a clear error."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from phalanx.domain import Framework
from phalanx.errors import SpecError
from phalanx.plan import build_plan
from phalanx.spec.dump import spec_to_yaml
from phalanx.spec.loader import load_spec, load_spec_text
from tests.conftest import CORPUS as CORPUS_ROOT

CORPUS = CORPUS_ROOT / "polyaxonfiles"
FILES = sorted(p for p in CORPUS.glob("*.y*ml"))

# The files with real mistakes, and what each must be told (line, key path, words in the message).
REFUSED = {
    "pytorch__cifar10-ignite__polyaxonfile_train_2.yml": [
        (6, "framework", "unknown framework 'pytorch-ignite'; did you mean 'pytorch'?"),
        (16, "environment.resources.gpu.request", "unknown key; did you mean 'requests'?"),
    ],
    # polyaxon-lib sections (Polyaxon dropped them in 0.5) and no command to run: nothing Phalanx
    # could start, so it says so rather than load a file that runs nothing.
    "fixtures__advanced_file_with_custom_configs_and_resources.yml": [
        (2, "run.cmd", "missing"),
        (83, "model", "polyaxon-lib section"),
        (134, "train", "polyaxon-lib section"),
        (151, "eval", "polyaxon-lib section"),
    ],
}


def kind_of(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["kind"])


def test_the_corpus_is_all_there() -> None:
    assert len(FILES) == 25
    experiments = [p for p in FILES if kind_of(p) == "experiment"]
    assert len(experiments) - len(REFUSED) == 19  # the files that load


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_corpus_file_loads_or_gets_a_clear_error(path: Path) -> None:
    kind = kind_of(path)
    if kind == "group":  # read by the group reader (tests/unit/spec/test_group.py); load_spec says so
        with pytest.raises(SpecError) as err:
            load_spec(path)
        (problem,) = err.value.problems
        assert problem.path == "kind"
        assert "phalanx group run -f FILE" in problem.message
        return
    if kind != "experiment":
        with pytest.raises(SpecError) as err:
            load_spec(path)
        (problem,) = err.value.problems
        assert problem.path == "kind"
        if kind in ("notebook", "tensorboard"):  # started by a command of their own
            assert f"`phalanx {kind} start" in problem.message
        else:
            assert problem.message == f"'{kind}' is not supported yet; Phalanx runs kind: experiment files"
        return
    if path.name in REFUSED:
        with pytest.raises(SpecError) as err:
            load_spec(path)
        got = [(p.line, p.path, p.message) for p in err.value.problems]
        assert [(line, key) for line, key, _ in got] == [(line, key) for line, key, _ in REFUSED[path.name]]
        for (_, _, message), (_, _, words) in zip(got, REFUSED[path.name], strict=True):
            assert words in message
        assert all(p.file == str(path) and p.column for p in err.value.problems)
        return
    spec = load_spec(path)
    plan = build_plan(spec)
    assert "\\" not in plan.command  # shell line continuations were re-joined
    assert "{{" not in plan.command
    again = load_spec_text(spec_to_yaml(spec), "dumped.yml")
    assert replace(again, source_text=None) == replace(spec, source_text=None, source_file=None)


def test_the_older_layout_fixture_equals_the_newer_one() -> None:
    newer = load_spec(CORPUS / "fixtures__distributed_tensorflow_with_node_selectors_file.yml")
    older = load_spec(CORPUS / "fixtures__distributed_tensorflow_with_node_selectors_file__v0.3.9.yml")
    assert replace(older, source_file=None, source_text=None) == replace(
        newer, source_file=None, source_text=None
    )
    plan = build_plan(newer)
    assert plan.topology() == {"master": 1, "worker": 5, "ps": 10}
    assert plan.replica("master").node_selector == {"polyaxon.com": "node_for_master_task"}
    assert plan.replica("worker-2").node_selector == {"polyaxon.com": "node_for_worker_task_2"}
    assert plan.replica("worker-2").resources.cpu.requests == 3  # default resources, own selector
    assert plan.replica("worker-3").resources.memory.limits == 300
    assert plan.replica("worker-3").resources.cpu.requests is None  # the override replaces resources
    assert plan.replica("ps-9").resources.memory.requests == 512


def test_pre_0_4_2_layouts_that_polyaxon_rejected_load() -> None:
    mx = load_spec(CORPUS / "mxnet__cifar10__polyaxonfile_distributed.yml")
    assert (mx.framework, mx.topology.n_workers, mx.topology.n_ps) == (Framework.MXNET, 2, 1)
    assert mx.build.env_vars == {"PS_VERBOSE": "2"}
    torch = load_spec(CORPUS / "pytorch__mnist__polyaxonfile_distributed__v0.3.9.yml")
    assert (torch.framework, torch.topology.n_workers) == (Framework.PYTORCH, 1)
    assert build_plan(torch).command.startswith(
        "python distributed_run.py --batch-size=128 --test-batch-size=1000 --epochs=5 --lr=0.01"
    )


def test_polyaxon_keys_that_mean_nothing_here_are_noted() -> None:
    spec = load_spec(CORPUS / "fixtures__distributed_mpi_file.yml")
    assert len(spec.notes) == 1
    assert spec.notes[0].endswith(
        ":9:1: logging: accepted for Polyaxon compatibility and ignored:"
        " Phalanx captures every replica's output"
    )
