"""The estimators: seed 004's parameters map onto the same spec and plan the file gives, and every
mistake is refused in the constructor with the parameter named and the fix said."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from phalanx import Estimator, Experiment, PyTorch, PyTorchDistribution, TensorFlow, TensorFlowDistribution
from phalanx.domain import BackendKind, Framework, Range, Role
from phalanx.errors import SpecError, UsageError
from phalanx.estimators import MpiDistribution
from phalanx.plan import Plan, build_plan
from phalanx.spec.loader import load_spec_text


@pytest.fixture
def project(tmp_path: Path) -> Path:
    src = tmp_path / "my-pytorch-proj"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print('train')\n")
    (src / "pkg" / "main.py").write_text("print('main')\n")
    (src / "requirements.txt").write_text("numpy\n")
    (tmp_path / "outside.py").write_text("print('outside')\n")
    return src


def _problem(exc: pytest.ExceptionInfo[SpecError], param: str) -> str:
    found = [p for p in exc.value.problems if p.path.split(".")[0] == param]
    assert found, f"no problem names {param!r}: {exc.value}"
    return found[0].message


def _plan_without_text(plan: Plan) -> Plan:
    return dataclasses.replace(plan, source_text=None)


# -- mapping ------------------------------------------------------------------------------------


def test_script_params_become_arguments_and_empty_string_is_a_bare_flag(project: Path) -> None:
    est = PyTorch(
        project,
        entry_script="train.py",
        script_params={"--data_dir": "/data/my data", "--epochs": 10, "--verbose": "", "--dry": False},
    )
    assert est.command == "python train.py --data_dir '/data/my data' --epochs 10 --verbose"


def test_script_params_are_declared_params_and_the_plan_runs_the_same_command(project: Path) -> None:
    """Like an experiment file's params: recorded as the experiment's (section Declared), shown and
    filtered as param:KEY, and a rerun's --param changes them."""
    est = PyTorch(
        project,
        entry_script="train.py",
        script_params={"--lr": 0.1, "--data-dir": "/data/my data", "--layers": [2, 3], "--verbose": True},
    )
    spec = est.to_spec()
    assert spec.params == {"lr": 0.1, "data_dir": "/data/my data"}
    assert spec.command == ("python train.py --lr {{ lr }} --data-dir {{ data_dir }} --layers 2 3 --verbose",)
    plan = build_plan(spec)
    assert (
        plan.command
        == est.command
        == "python train.py --lr 0.1 --data-dir '/data/my data' --layers 2 3 --verbose"
    )
    assert plan.params == {"lr": 0.1, "data_dir": "/data/my data"}
    assert build_plan(spec, {"lr": 0.2}).command.startswith("python train.py --lr 0.2 ")


def test_single_node_pytorch_is_one_master(project: Path) -> None:
    plan = build_plan(PyTorch(project, entry_script="train.py").to_spec())
    assert [r.name for r in plan.replicas] == ["master"]
    assert plan.framework is Framework.PYTORCH
    assert plan.world_size == 1


def test_node_count_makes_a_master_and_workers_and_processes_per_node_multiply(project: Path) -> None:
    est = PyTorch(
        project, entry_script="train.py", node_count=3, process_count_per_node=2, distributed_backend="gloo"
    )
    plan = build_plan(est.to_spec(name="ddp"))
    assert [(r.name, r.role, r.rank, r.processes) for r in plan.replicas] == [
        ("master", Role.MASTER, 0, 2),
        ("worker-0", Role.WORKER, 1, 2),
        ("worker-1", Role.WORKER, 2, 2),
    ]
    assert plan.world_size == 6
    assert plan.backend is None  # gloo / nccl: torch.distributed wiring, no mpirun


def test_distribution_config_gives_the_same_plan_as_the_arguments(project: Path) -> None:
    args = PyTorch(
        project, entry_script="train.py", node_count=2, process_count_per_node=2, distributed_backend="gloo"
    )
    config = PyTorch(
        project,
        entry_script="train.py",
        distribution=PyTorchDistribution(node_count=2, process_count_per_node=2),
    )
    assert build_plan(args.to_spec()) == build_plan(config.to_spec())


def test_mpi_backend_maps_to_the_files_mpi_backend(project: Path) -> None:
    spec = PyTorch(project, entry_script="train.py", node_count=2, distributed_backend="mpi").to_spec()
    assert (spec.framework, spec.backend) == (Framework.HOROVOD, BackendKind.MPI)  # Horovod comes with it
    generic = Estimator(
        project, entry_script="train.py", distribution=MpiDistribution(node_count=2)
    ).to_spec()
    assert (generic.framework, generic.backend) == (Framework.HOROVOD, BackendKind.MPI)


def test_use_gpu_requests_one_gpu_per_process_on_every_replica(project: Path) -> None:
    est = PyTorch(
        project,
        entry_script="train.py",
        node_count=2,
        process_count_per_node=2,
        distributed_backend="nccl",
        use_gpu=True,
    )
    plan = build_plan(est.to_spec())
    assert {r.name: r.resources.gpu for r in plan.replicas} == {
        "master": Range(2, 2),
        "worker-0": Range(2, 2),
    }


def test_tensorflow_ps_counts_the_master_as_a_worker_and_adds_parameter_servers(project: Path) -> None:
    est = TensorFlow(
        project, entry_script="train.py", distribution=TensorFlowDistribution(3, 2), use_gpu=True
    )
    plan = build_plan(est.to_spec())
    assert plan.topology() == {"master": 1, "worker": 2, "ps": 2}
    assert [r.resources.gpu.requests for r in plan.replicas] == [1, 1, 1, None, None]
    mirrored = TensorFlow(
        project, entry_script="train.py", distributed_backend="ps", worker_count=2, parameter_server_count=0
    )
    assert build_plan(mirrored.to_spec()).topology() == {"master": 1, "worker": 1, "ps": 0}


def test_resources_accept_quantities_and_ranges(project: Path) -> None:
    est = PyTorch(
        project,
        entry_script="train.py",
        resources={"cpu": "500m", "memory": {"requests": "1Gi", "limits": 2048}},
    )
    res = build_plan(est.to_spec()).replicas[0].resources
    assert (res.cpu, res.memory) == (Range(0.5, 0.5), Range(1024, 2048))


def test_packages_environment_and_duration_reach_the_spec(project: Path) -> None:
    est = PyTorch(
        project,
        entry_script="pkg/main.py",
        pip_packages=["numpy==2.4.6"],
        pip_requirements_file="requirements.txt",
        environment_variables={"OMP_NUM_THREADS": 1},
        max_run_duration_seconds=600,
    )
    spec = est.to_spec()
    assert spec.command == ("python pkg/main.py",)
    assert spec.build.pip_packages[0] == "numpy==2.4.6"  # the user's pin wins: no second numpy
    assert "torch==2.13.0" in spec.build.pip_packages  # a PyTorch venv always has torch
    assert [p for p in spec.build.pip_packages if p.startswith("numpy")] == ["numpy==2.4.6"]
    assert spec.build.requirements == str(project / "requirements.txt")
    assert dict(spec.env) == {"OMP_NUM_THREADS": "1"}
    assert spec.max_run_seconds == 600


def test_a_framework_estimators_environment_always_has_its_framework_and_the_onnx_pieces(
    project: Path,
) -> None:
    packages = PyTorch(project, entry_script="train.py", pip_packages=["scikit-learn"]).to_spec()
    names = [p.split("==")[0] for p in packages.build.pip_packages]
    assert names == ["scikit-learn", "torch", "numpy", "onnx", "onnxscript", "onnxruntime"]
    assert "torch==2.13.0" in packages.build.pip_packages
    own_torch = PyTorch(project, entry_script="train.py", pip_packages=["Torch==2.13.0+cpu"]).to_spec()
    assert [p for p in own_torch.build.pip_packages if "orch" in p] == ["Torch==2.13.0+cpu"]
    # nothing to install: Phalanx's own interpreter (it has torch), no venv built for nothing
    assert PyTorch(project, entry_script="train.py").to_spec().build.pip_packages == ()
    horovod = PyTorch(project, entry_script="train.py", node_count=2, distributed_backend="mpi")
    assert [p.split("==")[0] for p in horovod.to_spec().build.pip_packages] == [
        "torch", "numpy", "onnx", "onnxscript", "onnxruntime"
    ]  # fmt: skip
    assert TensorFlow(project, entry_script="train.py").to_spec().build.pip_packages == (
        "tensorflow-cpu==2.21.0",
    )
    tf_own = TensorFlow(project, entry_script="train.py", pip_packages=["tensorflow==2.21.0"]).to_spec()
    assert tf_own.build.pip_packages == ("tensorflow==2.21.0",)


def test_absolute_entry_script_inside_source_directory_is_made_relative(project: Path) -> None:
    assert PyTorch(project, entry_script=project / "pkg" / "main.py").entry_script == "pkg/main.py"


# -- to_yaml round trip ---------------------------------------------------------------------------

ROUND_TRIP_CASES: list[tuple[type[Estimator], dict[str, Any]]] = [
    (PyTorch, {}),
    (
        PyTorch,
        {
            "script_params": {"--lr": 0.1, "--name": "a b", "--flag": ""},
            "node_count": 2,
            "process_count_per_node": 2,
            "distributed_backend": "gloo",
            "resources": {"cpu": {"requests": 1, "limits": 2}, "memory": "512Mi"},
            "environment_variables": {"SEED": "7"},
            "max_run_duration_seconds": 90,
            "pip_packages": ["numpy"],
            "pip_requirements_file": "requirements.txt",
        },
    ),
    (PyTorch, {"node_count": 3, "distributed_backend": "nccl", "use_gpu": True}),
    (PyTorch, {"distribution": MpiDistribution(node_count=2, process_count_per_node=2)}),
    (
        TensorFlow,
        {"distributed_backend": "ps", "worker_count": 3, "parameter_server_count": 1, "use_gpu": True},
    ),
    (TensorFlow, {"node_count": 2, "distributed_backend": "mpi"}),
    (Estimator, {"node_count": 2, "distributed_backend": "mpi", "image": "python:3.11"}),
]


@pytest.mark.parametrize(("cls", "kwargs"), ROUND_TRIP_CASES)
def test_to_yaml_loads_back_to_the_same_spec_and_plan(
    project: Path, cls: type[Estimator], kwargs: dict[str, Any]
) -> None:
    est = cls(project, entry_script="train.py", **kwargs)
    spec = est.to_spec(name="round-trip", project="estimators", tags=["a", "b"])
    text = est.to_yaml(name="round-trip", project="estimators", tags=["a", "b"])
    loaded = load_spec_text(text, filename="estimator.yml")
    assert dataclasses.replace(loaded, source_text=None, source_file=None) == spec
    assert _plan_without_text(build_plan(loaded)) == _plan_without_text(build_plan(spec))


def test_to_yaml_is_a_readable_experiment_file(project: Path) -> None:
    text = PyTorch(
        project, entry_script="train.py", node_count=2, process_count_per_node=2, distributed_backend="gloo"
    ).to_yaml(name="ddp")
    assert "framework: pytorch" in text
    assert "n_workers: 1" in text
    assert "processes_per_replica: 2" in text
    assert "cmd: python train.py" in text


# -- every mistake, named ---------------------------------------------------------------------------

ERRORS: list[tuple[str, dict[str, Any], str, str]] = [
    # (parameter named, arguments, a phrase of the message, a phrase of the fix)
    ("node_count", {"node_count": 0}, "0 is not allowed", ">= 1"),
    ("node_count", {"node_count": 1.5}, "1.5 is not allowed", "whole number"),
    ("process_count_per_node", {"process_count_per_node": -1}, "-1 is not allowed", ">= 1"),
    ("process_count_per_node", {"process_count_per_node": 2}, "need a distributed backend", "'gloo'"),
    ("node_count", {"node_count": 2}, "need a distributed backend", "distributed_backend="),
    ("distributed_backend", {"distributed_backend": "glo"}, "did you mean 'gloo'", "'nccl'"),
    ("distributed_backend", {"distributed_backend": "ps"}, "not a PyTorch backend", "'mpi'"),
    ("distributed_backend", {"distributed_backend": "nccl"}, "GPUs only", "use_gpu=True"),
    ("conda_packages", {"conda_packages": ["numpy"]}, "not conda", "pip_packages"),
    ("conda_dependencies_file", {"conda_dependencies_file": "env.yml"}, "not conda", "pip_requirements_file"),
    ("nod_count", {"nod_count": 2}, "unknown parameter", "did you mean 'node_count'"),
    ("vm_size", {"vm_size": "STANDARD_NC6"}, "not supported", "compute_target"),
    ("framework_version", {"framework_version": "1.0"}, "not supported", "pip_packages"),
    ("pip_packages", {"pip_packages": "numpy"}, "give a list", "['numpy']"),
    ("pip_requirements_file", {"pip_requirements_file": "missing.txt"}, "not found", "source_directory"),
    (
        "environment_variables",
        {"environment_variables": {"PHALANX_HOME": "/x"}},
        "set by Phalanx",
        "another name",
    ),
    ("environment_variables", {"environment_variables": ["A=1"]}, "give a dict", "names to values"),
    ("max_run_duration_seconds", {"max_run_duration_seconds": 0}, "positive number", "None"),
    ("resources", {"resources": {"memory": "1Gb"}}, "unknown unit 'Gb'", "did you mean"),
    ("resources", {"resources": {"cpu": {"requests": 2, "limits": 1}}}, "below requests", "raise limits"),
    ("resources", {"resources": {"disk": 10}}, "unknown key 'disk'", "cpu, memory, gpu"),
    ("script_params", {"script_params": "--lr 0.1"}, "give a dict", "list of strings"),
    ("script_params", {"script_params": {"--x": object()}}, "cannot be a command-line value", "pass a str"),
    ("script_params", {"script_params": {"--x": "{{ y }}"}}, "cannot contain", "placeholders"),
    ("compute_target", {"compute_target": 3}, "'local'", "phalanx cluster ls"),
    ("worker_count", {"worker_count": 2}, "only for TensorFlow", "node_count"),
    (
        "distribution",
        {"distribution": PyTorchDistribution(node_count=2), "node_count": 2},
        "either distribution= or node_count",
        "not both",
    ),
    ("distribution", {"distribution": "ddp"}, "give PyTorchDistribution", "MpiDistribution"),
    (
        "distribution",
        {"distribution": TensorFlowDistribution()},
        "needs the TensorFlow estimator",
        "TensorFlow",
    ),
    ("script_params", {"script_params": {}, "arguments": ["--a"]}, "either arguments or", "not both"),
]


@pytest.mark.parametrize(
    ("param", "kwargs", "what", "fix"), ERRORS, ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)]
)
def test_every_mistake_names_the_parameter_and_the_fix(
    project: Path, param: str, kwargs: dict[str, Any], what: str, fix: str
) -> None:
    with pytest.raises(SpecError) as exc:
        PyTorch(project, entry_script="train.py", **kwargs)
    message = _problem(exc, param if param != "script_params" or "arguments" not in kwargs else "arguments")
    assert what in message
    assert fix in message


def test_entry_script_outside_source_directory_is_refused(project: Path) -> None:
    with pytest.raises(SpecError) as exc:
        PyTorch(project, entry_script="../outside.py")
    message = _problem(exc, "entry_script")
    assert "is not inside source_directory" in message
    assert "move the script there" in message


def test_missing_entry_script_and_source_directory_are_refused(project: Path) -> None:
    with pytest.raises(SpecError) as exc:
        PyTorch(project, entry_script="tran.py")
    assert "not found in" in _problem(exc, "entry_script")
    with pytest.raises(SpecError) as exc:
        PyTorch(project, script_params={})
    assert "entry_script='train.py'" in _problem(exc, "entry_script")
    with pytest.raises(SpecError) as exc:
        PyTorch(project / "nope", entry_script="train.py")
    assert "does not exist" in _problem(exc, "source_directory")


def test_tensorflow_mistakes_point_to_its_own_parameters(project: Path) -> None:
    with pytest.raises(SpecError) as exc:
        TensorFlow(project, entry_script="train.py", worker_count=2)
    assert "set distributed_backend='ps'" in _problem(exc, "worker_count")
    with pytest.raises(SpecError) as exc:
        TensorFlow(project, entry_script="train.py", distributed_backend="ps", node_count=2)
    assert "worker_count and parameter_server_count" in _problem(exc, "node_count")
    with pytest.raises(SpecError) as exc:
        TensorFlow(project, entry_script="train.py", distributed_backend="gloo")
    assert "'ps', 'mpi'" in _problem(exc, "distributed_backend")
    with pytest.raises(SpecError) as exc:
        TensorFlow(project, entry_script="train.py", distributed_backend="ps", parameter_server_count=-1)
    assert ">= 0" in _problem(exc, "parameter_server_count")


def test_several_mistakes_are_reported_together(project: Path) -> None:
    with pytest.raises(SpecError) as exc:
        PyTorch(project, entry_script="nope.py", node_count=0, conda_packages=["x"])
    assert {p.path for p in exc.value.problems} >= {"entry_script", "node_count", "conda_packages"}


def test_experiment_names_and_tags_are_checked_before_anything_starts(
    project: Path, phalanx_home: Path
) -> None:
    with pytest.raises(UsageError, match="name"):
        Experiment("")
    est = PyTorch(project, entry_script="train.py")
    with pytest.raises(UsageError, match="tags"):
        Experiment("ok").submit(est, tags="one")
    with pytest.raises(UsageError, match="not a configured cluster"):
        Experiment("ok").submit(PyTorch(project, entry_script="train.py", compute_target="gpu-farm"))
    with pytest.raises(UsageError, match="takes an Estimator"):
        Experiment("ok").submit("train.py")  # type: ignore[arg-type]
    assert not (phalanx_home / "runs").exists() or not any((phalanx_home / "runs").iterdir())
