"""`kind: notebook` and `kind: tensorboard` files (Polyaxon 0.x's services): what each holds, and
every mistake said at once, located, with how to fix it."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.domain import Range
from phalanx.errors import SpecError
from phalanx.spec.loader import load_spec_text
from phalanx.spec.service_files import load_board_file, load_notebook_file

POLYAXON_NOTEBOOK = """\
version: 1
kind: notebook
project: vision
build:
  image: python:3.11
  build_steps: [pip install jupyter]
  pip_packages: [scikit-learn==1.5.2]
environment:
  resources:
    cpu: {requests: 1, limits: 2}
    memory: {limits: 2Gi}
    gpu: {limits: 1}
inputs:
  - {name: digits, dataset: digits@latest}
"""


def _file(tmp_path: Path, text: str, name: str = "notebook.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _problems(load: object, path: Path) -> list[str]:
    with pytest.raises(SpecError) as refused:
        load(path)  # type: ignore[operator]
    return [str(p) for p in refused.value.problems]


def test_a_notebook_file_gives_its_build_resources_inputs_and_project(tmp_path: Path) -> None:
    notebook = load_notebook_file(_file(tmp_path, POLYAXON_NOTEBOOK))
    assert notebook.project == "vision" and notebook.folder == tmp_path
    assert notebook.build.pip_packages == ("scikit-learn==1.5.2",)
    assert notebook.build.build_steps == ("pip install jupyter",)
    assert notebook.resources is not None
    assert notebook.resources.cpu == Range(1, 2)
    assert notebook.resources.memory.limits == 2048  # MiB
    assert notebook.resources.gpu.limits == 1
    assert [(i.name, i.dataset) for i in notebook.inputs] == [("digits", "digits@latest")]


def test_a_bare_notebook_file_asks_for_nothing(tmp_path: Path) -> None:
    notebook = load_notebook_file(_file(tmp_path, "version: 1\nkind: notebook\n"))
    assert notebook.project is None and notebook.resources is None and notebook.inputs == ()
    assert not notebook.build.pip_packages and not notebook.build.build_steps


def test_every_mistake_of_a_notebook_file_is_said_at_once_where_it_is(tmp_path: Path) -> None:
    text = """\
version: 2
kind: notebook
run:
  cmd: jupyter lab
environment:
  n_workers: 2
  resources: {cpu: {limit: 2}}
inputs:
  - {name: digits}
"""
    assert _problems(load_notebook_file, _file(tmp_path, text)) == [
        f"{tmp_path}/notebook.yml:1:10: version: unsupported version 2; Phalanx reads `version: 1`",
        f"{tmp_path}/notebook.yml:3:1: run: a notebook runs JupyterLab: a notebook file has no run"
        " section; remove it",
        f"{tmp_path}/notebook.yml:6:3: environment.n_workers: a notebook runs once: its environment takes"
        " resources only",
        f"{tmp_path}/notebook.yml:7:21: environment.resources.cpu.limit: unknown key; did you mean"
        " 'limits'? (allowed here: requests, limits)",
        f"{tmp_path}/notebook.yml:9:5: inputs[0]: input 'digits': give one of dataset:"
        " NAME[@VERSION] or datastore: NAME",
    ]


def test_each_service_command_names_the_other_for_the_other_kind(tmp_path: Path) -> None:
    board = _file(tmp_path, "version: 1\nkind: tensorboard\n", "board.yml")
    notebook = _file(tmp_path, "version: 1\nkind: notebook\n")
    assert _problems(load_notebook_file, board) == [
        f"{board}:2:7: kind: this command starts a `kind: notebook` file, not kind: tensorboard;"
        " start it with `phalanx tensorboard start -f FILE`"
    ]
    assert _problems(load_board_file, notebook) == [
        f"{notebook}:2:7: kind: this command starts a `kind: tensorboard` file, not kind: notebook;"
        " start it with `phalanx notebook start -f FILE`"
    ]
    experiment = _file(tmp_path, "version: 1\nkind: experiment\nrun: {cmd: python t.py}\n", "t.yml")
    assert "not kind: experiment" in _problems(load_notebook_file, experiment)[0]


def test_a_tensorboard_file_names_its_project_and_its_build_is_noted_as_ignored(tmp_path: Path) -> None:
    board = load_board_file(
        _file(
            tmp_path,
            "version: 1\nkind: tensorboard\nproject: vision\n"
            "build:\n  image: tensorflow/tensorflow:1.4.1-py3\n",
            "board.yml",
        )
    )
    assert board.project == "vision"
    assert board.notes == (
        f"{tmp_path}/board.yml:4:1: build: accepted for Polyaxon compatibility and ignored: Phalanx's own"
        " TensorBoard renders what the experiments recorded",
    )
    refused = _file(tmp_path, "version: 1\nkind: tensorboard\ninputs: []\n", "bad.yml")
    assert _problems(load_board_file, refused) == [
        f"{refused}:3:1: inputs: a board reads what its experiments recorded: inputs are a notebook's;"
        " remove them"
    ]


@pytest.mark.parametrize("kind", ["notebook", "tensorboard"])
def test_running_a_service_file_names_the_command_that_starts_it(kind: str) -> None:
    with pytest.raises(SpecError) as refused:
        load_spec_text(f"version: 1\nkind: {kind}\n", "s.yml")
    assert f"`phalanx {kind} start -f FILE`" in str(refused.value.problems[0])
