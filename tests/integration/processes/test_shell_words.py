"""What Phalanx writes for a shell (the experiment's command line, the Slurm batch script, the MPI
rank wrapper) means to /bin/sh and bash what it must: each is run through the real shell here."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tests.unit.backends.conftest import plan
from tests.unit.backends.test_corpus_renders import CONTEXT, FILES, SETTINGS, loaded
from tests.unit.backends.test_slurm_script import render
from tests.unit.data.test_inputs import FILE

from phalanx.backends.slurm import SlurmBackend
from phalanx.clusters import Cluster
from phalanx.domain import Framework
from phalanx.frameworks import mpi
from phalanx.plan import build_plan
from phalanx.spec.inputs import InputSpec
from phalanx.spec.loader import load_spec_text


@pytest.mark.parametrize(
    ("cmd", "value", "argv"),
    [
        ("echo {{ v }}", "it's", ["it's"]),
        ("echo {{ v }}", "a;echo X", ["a;echo X"]),
        ("echo {{ v }}", "a b  c", ["a b  c"]),
        ("echo --v={{ v }}", "$(id) `id`", ["--v=$(id) `id`"]),
        ('echo "--v={{ v }}"', 'say "hi" $HOME \\', ['--v=say "hi" $HOME \\']),
        ("echo '{{ v }}'", "it's", ["it's"]),
        ("echo {{ v }}", {"a": [1, 2]}, ['{"a": [1, 2]}']),
        ("echo {{ v | raw }}", "a b", ["a", "b"]),
    ],
)
def test_a_value_reaches_the_command_as_one_argument(cmd: str, value: object, argv: list[str]) -> None:
    """Values used to be pasted into the shell as written: `it's` failed at run time, `a;echo X`
    ran a second command, a mapping became several words."""
    text = f"version: 1\nkind: experiment\nrun:\n  cmd: {json.dumps(cmd)}\n"
    spec = load_spec_text(text, "f.yml", params={"v": value})
    command = build_plan(spec).command.replace("echo", "printf '%s\\n'", 1)
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:-1] == argv


def test_the_file_inputs_section_and_placeholders() -> None:
    spec = load_spec_text(FILE)
    assert spec.inputs == (
        InputSpec("digits", dataset="digits@2"),
        InputSpec("raw", datastore="lake", path="images/train", mode="mount"),
    )
    plan = build_plan(spec)
    env = {"PHALANX_INPUT_DIGITS": "/cache/a b", "PHALANX_INPUT_RAW": "/nfs/x y"}
    echoed = subprocess.run(
        ["/bin/sh", "-c", plan.command.replace("python train.py", "printf '%s\\n'")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # one shell word each, wherever the placeholder stood (bare, "...", '...')
    assert echoed == ["--data", "/cache/a b", "--raw", "/nfs/x y/x", "--q", "/cache/a b"]
    assert [i["name"] for i in plan.to_json()["inputs"]] == ["digits", "raw"]


def test_the_rank_wrapper_names_each_rank_as_torch_and_phalanx_expect() -> None:
    """Run the wrapper as Open MPI would start rank 3 of 4 (2 processes per replica)."""
    env = {
        **os.environ,
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "3",
        "PHALANX_PROCESSES": "2",
        mpi.COMMAND_VAR: 'echo "$RANK $WORLD_SIZE $NODE_RANK $PHALANX_REPLICA $PHALANX_ROLE $PHALANX_INDEX"',
    }
    out = subprocess.run(
        ["/bin/sh", "-c", mpi.RANK_WRAPPER], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["3", "4", "1", "worker-0", "worker", "0"]


def test_tensorflow_hosts_are_every_task_address() -> None:
    script = render(plan(framework=Framework.TENSORFLOW, workers=1, ps=1))
    line = next(x for x in script.splitlines() if "TF_CONFIG" in x and "ps" in x and '\\"index\\":0' in x)
    value = line.split("=", 1)[1]
    for i in range(3):
        assert f"${{ADDR[{i}]}}" in value
    # after the shell expands it, TF_CONFIG is JSON with the hosts in place
    expanded = subprocess.run(
        ["bash", "-c", f"ADDR=(10.0.0.1 10.0.0.2 10.0.0.3); echo {value}"], capture_output=True, text=True
    ).stdout
    config = json.loads(expanded)
    assert config["cluster"]["chief"][0].startswith("10.0.0.1:")
    assert config["cluster"]["ps"][0].startswith("10.0.0.3:")


def test_the_script_is_valid_bash() -> None:
    script = render(
        plan(
            framework=Framework.TENSORFLOW, workers=2, ps=1, command="python -c 'print(1)' && echo \"$HOME\""
        )
    )
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_every_corpus_files_sbatch_script_parses_as_bash() -> None:
    """The corpus renders of tests/unit/backends/test_corpus_renders.py, through `bash -n`."""
    hpc = Cluster(name="s", kind="slurm", shared_dir="/shared/phalanx")
    rendered = 0
    for path in FILES:
        spec = loaded(path)
        if spec is None:
            continue  # a known-invalid file (the unit test checks the refusal)
        script = SlurmBackend(hpc, SETTINGS).dry_run(build_plan(spec), CONTEXT).native
        done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
        assert done.returncode == 0, f"{path.name}: {done.stderr}"
        rendered += 1
    assert rendered >= 15
