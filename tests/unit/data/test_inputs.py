"""Inputs as the experiment file and the estimator give them: `inputs:` and `{{ inputs.NAME }}`,
the estimator's inputs= and seed 004's `script_params={'--data_dir': ds}`; every replica's command
reads the path from the same environment variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from phalanx.data import Datastore
from phalanx.errors import SpecError, UsageError
from phalanx.estimators import PyTorch
from phalanx.plan import build_plan
from phalanx.spec.inputs import InputSpec, env_name
from phalanx.spec.loader import load_spec_text
from tests.support.cli import phalanx_cli

FILE = """
version: 1
kind: experiment
inputs:
  - name: digits
    dataset: digits@2
  - name: raw
    datastore: lake
    path: images/train
    mode: mount
run:
  cmd: python train.py --data {{ inputs.digits }} --raw "{{ inputs.raw }}/x" --q '{{ inputs.digits }}'
"""


@pytest.mark.parametrize(
    ("inputs", "cmd", "message"),
    [
        ("[{name: d, dataset: x}]", "echo {{ inputs.other }}", r"names no input \(inputs: d\)"),
        ("[{name: d, dataset: x, mode: copy}]", "echo", "mode 'copy': use download or mount"),
        ("[{name: d, dataset: x, datastore: y}]", "echo", "give one of dataset"),
        ("[{name: d, dataset: x}, {name: d, dataset: y}]", "echo", "two inputs are named 'd'"),
        ("[{name: d, dataset: x, where: /data}]", "echo", "unknown key"),
        # a folder outside the datastore is refused with the file, before a server records anything
        ("[{name: d, datastore: lake, path: ../srv}]", "echo", r"path '\.\./srv': give a folder inside"),
        ("[{name: d, datastore: lake, path: a/../../b}]", "echo", "relative, without '..'"),
        ("[{name: d, datastore: lake, path: /etc}]", "echo", r"path '/etc': give a folder inside"),
    ],
)
def test_input_mistakes_name_the_key(inputs: str, cmd: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_spec_text(f"version: 1\nkind: experiment\ninputs: {inputs}\nrun: {{cmd: '{cmd}'}}\n")


def test_polyaxon_typed_inputs_are_still_refused_with_their_message() -> None:
    with pytest.raises(SpecError, match=r"Polyaxon 0\.6 `inputs` are not supported"):
        load_spec_text("version: 1\nkind: experiment\ninputs: [{name: lr, type: float}]\nrun: {cmd: echo}\n")


def test_a_misspelt_dataset_key_is_pointed_at_not_read_as_polyaxons_typed_inputs() -> None:
    text = (
        "version: 1\nkind: experiment\ninputs:\n  - {name: d, datset: x@1}\n"
        "run: {cmd: 'echo {{ inputs.d }}'}\n"
    )
    with pytest.raises(SpecError) as err:
        load_spec_text(text, "f.yml")
    found = [str(p) for p in err.value.problems]
    assert any("inputs[0].datset: unknown key; did you mean 'dataset'?" in p for p in found), found
    assert not any("Polyaxon 0.6" in p or "names no input" in p for p in found), found


def test_seed_004_datastore_in_script_params(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    ds = Datastore("digits-store", str(tmp_path))
    est = PyTorch(
        source_directory=tmp_path,
        entry_script="train.py",
        script_params={"--data_dir": ds, "--sub": ds.path("train").as_download(), "--lr": "0.1"},
        node_count=2,
        distributed_backend="gloo",
    )
    spec = est.to_spec()
    assert spec.inputs == (
        InputSpec("digits-store", datastore="digits-store", mode="mount"),
        InputSpec("digits-store_train", datastore="digits-store", path="train", mode="download"),
    )
    assert spec.command == (
        f'python train.py --data_dir "${{{env_name("digits-store")}}}" '
        f'--sub "${{{env_name("digits-store_train")}}}" --lr {{{{ lr }}}}',
    )
    assert spec.params == {"lr": "0.1"}  # a declared param; the datastores are inputs, not params
    assert build_plan(spec).command.endswith("--lr 0.1")


def test_the_estimator_file_keeps_its_inputs(tmp_path: Path) -> None:
    """Experiment.submit writes the estimator as a file: the inputs and the command must survive it."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    est = PyTorch(
        source_directory=tmp_path,
        entry_script="train.py",
        script_params={"--data_dir": Datastore("lake", str(tmp_path))},
        inputs=[{"name": "digits", "dataset": "digits@3"}],
    )
    spec = est.to_spec()
    again = load_spec_text(est.to_yaml())
    assert again.inputs == spec.inputs and again.command == spec.command


def test_resume_and_rerun_read_the_versions_the_run_used() -> None:
    from phalanx.data.lineage import inputs_diff, pin_inputs

    spec = load_spec_text(FILE.replace("digits@2", "digits@latest"))
    recorded = {
        "inputs": [
            {"name": "digits", "kind": "dataset", "ref": "digits@5", "digest": "ab" * 32, "mode": "download"},
            {
                "name": "raw",
                "kind": "datastore",
                "datastore": "lake",
                "path": "images/train",
                "mode": "mount",
            },
        ]
    }
    pinned = pin_inputs(spec, recorded)
    assert pinned.inputs[0] == InputSpec("digits", dataset="digits@5")
    assert pinned.inputs[1] == spec.inputs[1]
    # `phalanx rerun --latest-data`: each dataset at its latest version, datastores as they were
    from phalanx.data.lineage import latest_inputs

    assert latest_inputs(pinned).inputs == (InputSpec("digits", dataset="digits@latest"), spec.inputs[1])
    assert pin_inputs(spec, {}) is spec  # nothing recorded (an older run): as written
    other = {
        "inputs": [{**recorded["inputs"][0], "ref": "digits@6", "digest": "cd" * 32}, recorded["inputs"][1]]
    }
    assert inputs_diff(recorded, other) == {
        "digits": {"a": f"digits@5 ({'ab' * 6})", "b": f"digits@6 ({'cd' * 6})"}
    }


def test_each_inputs_mistake_is_said_at_its_own_input() -> None:
    """Every input's mistake at that input's line, each one, not the first only at the list's start
    (`inputs: inputs[1]: ...` pointed at the line of inputs[0])."""
    text = (
        "version: 1\nkind: experiment\ninputs:\n"
        "  - name: digits\n    dataset: digits@1\n    datastore: lake\n"
        "  - name: raw\n    datastore: lake\n    mode: mnt\n"
        "run: {cmd: 'echo {{ inputs.digits }} {{ inputs.raw }}'}\n"
    )
    with pytest.raises(SpecError) as err:
        load_spec_text(text, "f.yml")
    assert [str(p) for p in err.value.problems] == [
        "f.yml:4:5: inputs[0]: input 'digits': give one of dataset: NAME[@VERSION] or datastore: NAME",
        "f.yml:7:5: inputs[1]: input 'raw': mode 'mnt': use download or mount",
    ]


def test_check_refuses_a_malformed_dataset_version_as_run_does(tmp_path: Path) -> None:
    """`phalanx check` passed `dataset: digits@x`, which `phalanx run` then refused when it looked the
    dataset up: the file's check applies the catalog's rule, said at the reference's own line."""
    path = tmp_path / "f.yml"
    path.write_text(
        "version: 1\nkind: experiment\ninputs:\n  - name: d\n    dataset: digits@x\n"
        "run: {cmd: 'echo {{ inputs.d }}'}\n"
    )
    done = phalanx_cli("check", "-f", path)
    assert done.returncode == 2, done.stdout
    assert done.stderr.splitlines()[0] == (
        f"{path}:5:14: inputs[0].dataset: dataset 'digits@x': the version 'x' is neither a whole number"
        " nor latest; write NAME, NAME@latest or NAME@VERSION (e.g. digits@3)"
    )
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("digits@", "the version '' is neither a whole number nor latest"),
        ("digits@1.5", "the version '1.5' is neither a whole number nor latest"),
        ("digits@v2", "the version 'v2' is neither a whole number nor latest"),
        ("digits@3@4", "the version '3@4' is neither a whole number nor latest"),
        ("-digits@3", "dataset name '-digits': use letters, digits"),
    ],
)
def test_every_malformed_dataset_reference_is_refused_with_the_file(ref: str, message: str) -> None:
    text = f"version: 1\nkind: experiment\ninputs: [{{name: d, dataset: '{ref}'}}]\nrun: {{cmd: echo}}\n"
    with pytest.raises(SpecError, match=re.escape(message)):
        load_spec_text(text, "f.yml")
    with pytest.raises(UsageError, match=re.escape(message)):  # the estimators' inputs= too
        InputSpec("d", dataset=ref)


@pytest.mark.parametrize("ref", ["digits", "digits@latest", "digits@3", "mnist.v2@12"])
def test_the_dataset_reference_forms_are_accepted(ref: str) -> None:
    text = f"version: 1\nkind: experiment\ninputs: [{{name: d, dataset: '{ref}'}}]\nrun: {{cmd: echo}}\n"
    assert load_spec_text(text).inputs == (InputSpec("d", dataset=ref),)
