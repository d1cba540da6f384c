"""Seed 004 (Azure ML's "Train PyTorch models") as written, and its next step, "Track run metrics".

- ``PyTorch(source_directory, script_params={'--data_dir': path}, entry_script='train.py',
  node_count=2, process_count_per_node=1, distributed_backend='mpi')`` is Horovod: framework horovod,
  one mpirun over 2 ranks, a venv holding torch, numpy and the ONNX pieces save_model needs, and the
  Horovod wheel (checked on the dry run: nothing is built).
- ``from phalanx import Run; run = Run.get_context(); run.log(...)`` inside both replicas of a real
  experiment, in a build venv that has only the standard-library SDK copy and in Phalanx's own
  interpreter, records every call per replica and rank.
- A failed MPI rank's reason is its own traceback, not Open MPI's boilerplate.
- The whole seed, live (Horovod trains, ONNX export checked): slow; it needs the Horovod wheel, which
  the first run on a machine builds (see test_horovod_seed_trains_and_exports_onnx).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import textwrap
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import phalanx_cli

from phalanx import Experiment, PyTorch, Run
from phalanx.config import Settings
from phalanx.domain import BackendKind, ExperimentStatus, Framework
from phalanx.ingest import Ingester
from phalanx.plan import build_plan
from phalanx.spec.loader import load_spec_text
from phalanx.store import open_store
from phalanx.store.sql import SqlStore

needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")

# Azure's "Track run metrics" calls, each rank saying who it is; also what it imported.
CONTEXT_SCRIPT = """
import importlib.util, io, json, os
import phalanx
from phalanx import Run

run = Run.get_context()
rank = int(os.environ["PHALANX_RANK"])
run.log("accuracy", 0.5 + rank)
run.log("accuracy", 0.6 + rank)
run.log_list("losses", [3, 2, 1])
run.log_row("Y over X", x=1, y=10 + rank)
run.log_row("Y over X", x=2, y=20 + rank, note="last row")
with open(f"pixel{rank}.png", "wb") as f:
    f.write(b"\\x89PNG\\r\\n\\x1a\\n")
run.log_image(f"image{rank}", path=f"pixel{rank}.png")
run.tag("said_by", f"rank {rank}")
run.upload_file(f"outputs/report{rank}.txt", io.BytesIO(f"from rank {rank}".encode()))
assert run.flush()
seen = {
    "class": type(run).__name__,
    "run_class": phalanx.Run.__module__,
    "sqlalchemy": importlib.util.find_spec("sqlalchemy") is not None,
    "id": run.id,
}
print("CONTEXT " + json.dumps(seen), flush=True)
"""


@pytest.fixture
def seed_project(tmp_path: Path) -> Path:
    src = tmp_path / "my-pytorch-proj"
    src.mkdir()
    (src / "train.py").write_text(textwrap.dedent(CONTEXT_SCRIPT))
    (tmp_path / "data").mkdir()
    return src


def shared_venvs(home: Path) -> None:
    """``home``'s venvs folder is the machine's cache of test venvs, shared by every test run and
    PHALANX_HOME ($PHALANX_TEST_VENVS, default ~/.cache/phalanx/venvs; see
    tests/integration/examples/test_framework_examples.py): an environment is keyed by what it holds,
    so only a machine's first run builds it."""
    shared = Path(os.environ.get("PHALANX_TEST_VENVS", Path.home() / ".cache" / "phalanx" / "venvs"))
    shared.mkdir(parents=True, exist_ok=True)
    (home / "venvs").symlink_to(shared, target_is_directory=True)


def ingested(home: Path) -> SqlStore:
    store = open_store(Settings(home=home, db_url=None, artifacts_url=None))
    Ingester(store, None, home / "spool").run_once()  # whatever the detached ingester has not yet
    return store


def only_experiment(store: SqlStore) -> Any:
    [exp] = store.list_experiments().items
    return exp


def assert_recorded_per_rank(store: SqlStore, exp_id: str) -> None:
    """What CONTEXT_SCRIPT's calls must leave: each replica's own series, rows, tags and files."""
    metrics = store.metrics(exp_id)
    assert {r: s.values for r, s in metrics["accuracy"].items()} == {
        "master": [0.5, 0.6],
        "worker-0": [1.5, 1.6],
    }
    assert {r: s.values for r, s in metrics["losses"].items()} == {
        "master": [3.0, 2.0, 1.0],
        "worker-0": [3.0, 2.0, 1.0],
    }
    assert metrics["Y over X/y"]["worker-0"].steps == [0, 1]
    assert metrics["Y over X/y"]["worker-0"].values == [11.0, 21.0]
    rows = [(t["title"], t["step"], t["replica"], json.loads(t["text"])) for t in store.texts(exp_id)]
    assert ("Y over X", 1, "worker-0", {"x": 2, "y": 21, "note": "last row"}) in rows  # a row with text
    assert len(rows) == 2  # only the rows that had text, one per replica
    tags = {(p.replica, p.rank, p.value) for p in store.params(exp_id) if p.section == "tags"}
    assert tags == {("master", 0, "rank 0"), ("worker-0", 1, "rank 1")}
    files = {a.name: (a.replica, a.rank) for a in store.artifacts(exp_id)}
    assert files == {
        "image0": ("master", 0),
        "image1": ("worker-0", 1),
        "report0.txt": ("master", 0),
        "report1.txt": ("worker-0", 1),
    }
    report = next(a for a in store.artifacts(exp_id) if a.name == "report1.txt")
    assert store.artifact_store is not None
    assert store.artifact_store.read_bytes(exp_id, report.path) == b"from rank 1"


def context_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line.split("CONTEXT ", 1)[1]) for line in text.splitlines() if "CONTEXT {" in line]


# -- the seed's call, planned -------------------------------------------------------------------------


@needs_mpirun
def test_seed004s_mpi_call_is_horovod_with_torch_and_the_onnx_pieces(
    seed_project: Path, phalanx_home: Path
) -> None:
    from phalanx.supervisor.preparing import prepare, with_horovod

    pt_est = PyTorch(
        source_directory=str(seed_project),
        script_params={"--data_dir": str(seed_project.parent / "data")},
        entry_script="train.py",
        node_count=2,
        process_count_per_node=1,
        distributed_backend="mpi",
    )
    spec = pt_est.to_spec()
    assert (spec.framework, spec.backend) == (Framework.HOROVOD, BackendKind.MPI)
    loaded = load_spec_text(pt_est.to_yaml(), filename="seed004.yml")
    assert dataclasses.replace(loaded, source_text=None, source_file=None) == spec
    assert "framework: horovod" in pt_est.to_yaml()
    plan = build_plan(spec)
    assert [(r.name, r.processes) for r in plan.replicas] == [("master", 1), ("worker-0", 1)]
    packages = {p.split("==")[0]: p for p in spec.build.pip_packages}
    assert packages["torch"] == "torch==2.13.0"
    assert {"numpy", "onnx", "onnxscript", "onnxruntime"} <= set(packages)

    # the dry run: Horovod's wheel joins the venv (named, not built), one mpirun over both ranks
    build = with_horovod(spec.build, str(seed_project), phalanx_home / "venvs", build=False)
    assert any(Path(p).name.startswith("horovod-0.28.1") for p in build.pip_packages), build.pip_packages
    prepared = prepare(spec, workdir=seed_project, dry=True)
    assert Path(prepared.context.python).parent.parent.parent == phalanx_home / "venvs"
    dry = phalanx_cli(  # in this process (tests/support/cli.py): a dry run starts nothing
        "run", "-f", _write(seed_project, pt_est.to_yaml()), "--workdir", str(seed_project), "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    assert "mpirun" in dry.stdout and "-np 2" in dry.stdout
    assert "--data_dir" in dry.stdout
    assert not (phalanx_home / "venvs").exists() or not any(
        (phalanx_home / "venvs").iterdir()
    )  # nothing built


def _write(folder: Path, text: str) -> str:
    path = folder.parent / "seed004.yml"
    path.write_text(text)
    return str(path)


# -- Run.get_context in a real 2-replica experiment ---------------------------------------------------


def test_run_get_context_records_per_rank_in_a_build_venv_with_only_the_sdk_copy(
    seed_project: Path, phalanx_home: Path
) -> None:
    """``build:`` makes a venv of its own: no SQLAlchemy, no Phalanx, only the standard-library SDK
    copy on PYTHONPATH, where ``phalanx.Run`` is the SDK's class. The venv (a bare one: `build_steps:
    ["true"]`) comes from the machine's cache of test venvs after its first build there."""
    shared_venvs(phalanx_home)
    spec = seed_project.parent / "context.yml"
    spec.write_text(
        textwrap.dedent(
            """\
            version: 1
            kind: experiment
            name: run-context
            framework: pytorch
            environment:
              replicas:
                n_workers: 1
            build:
              build_steps: ["true"]
            run:
              cmd: python train.py
            """
        )
    )
    done = phalanx_cli("run", "-f", spec, "--workdir", seed_project)  # in this process: the replicas are real
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = context_lines(done.stdout)
    assert len(seen) == 2, done.stdout[-3000:]
    for one in seen:
        assert one["class"] == "RunContext"
        assert one["run_class"] == "phalanx.tracking.context"  # the SDK copy's Run
        assert one["sqlalchemy"] is False  # the venv really has only the standard library
    store = ingested(phalanx_home)
    exp = only_experiment(store)
    assert exp.status is ExperimentStatus.SUCCEEDED
    assert {one["id"] for one in seen} == {exp.id}
    assert_recorded_per_rank(store, exp.id)


def test_run_get_context_records_per_rank_in_an_estimators_two_replicas(
    seed_project: Path, phalanx_home: Path
) -> None:
    """The estimator path, in Phalanx's own interpreter: ``phalanx.Run`` is the submitted-run class,
    and its ``get_context`` is the replica's run."""
    est = PyTorch(seed_project, entry_script="train.py", node_count=2, distributed_backend="gloo")
    run = Experiment("run-context", project="seed004").submit(est)
    try:
        details = run.wait_for_completion(show_output=False, timeout=240)
    finally:
        proc = run._process
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert details["status"] == "succeeded"
    seen = context_lines("\n".join(run.get_logs()))
    assert {(one["class"], one["run_class"], one["id"]) for one in seen} == {
        ("RunContext", "phalanx.runs", run.id)
    }
    assert_recorded_per_rank(ingested(phalanx_home), run.id)
    assert isinstance(Run(run.id).get_status(), ExperimentStatus)  # the handle's role is unchanged


# -- a failed rank says why ------------------------------------------------------------------------


@needs_mpirun
def test_a_failed_mpi_ranks_reason_is_its_own_traceback(seed_project: Path, phalanx_home: Path) -> None:
    (seed_project / "fail.py").write_text(
        "import os, time\n"
        "print('rank', os.environ['RANK'], 'starting', flush=True)\n"
        "if os.environ['RANK'] == '1':\n"
        "    import horovod_is_not_here\n"
        "time.sleep(1)\n"
    )
    spec = seed_project.parent / "mpi.yml"
    spec.write_text(
        "version: 1\nkind: experiment\nname: mpi-fail\nframework: pytorch\nbackend: mpi\n"
        "environment:\n  replicas:\n    n_workers: 1\nrun:\n  cmd: python fail.py\n"
    )
    done = phalanx_cli("run", "-f", spec, "--workdir", seed_project)  # in this process: mpirun is real
    assert done.returncode != 0
    exp = only_experiment(ingested(phalanx_home))
    assert exp.status is ExperimentStatus.FAILED
    reason = exp.reason or ""
    assert reason.startswith("worker-0 (rank 1) exited with code 1; last lines of its log:"), reason
    assert "ModuleNotFoundError: No module named 'horovod_is_not_here'" in reason
    assert "Traceback (most recent call last)" in reason
    assert "Primary job" not in reason and "Process name" not in reason and "----" not in reason
    replicas = {r.name: r.state.value for r in ingested(phalanx_home).list_replicas(exp.id)}
    assert replicas == {"master": "stopped", "worker-0": "failed"}


# -- the whole seed, live --------------------------------------------------------------------------

HOROVOD_SCRIPT = """
import argparse
import horovod.torch as hvd
import torch
from phalanx import Run, Task

parser = argparse.ArgumentParser()
parser.add_argument("--data_dir")
args = parser.parse_args()
hvd.init()
torch.manual_seed(0)
x = torch.randn(256, 8)
y = (x.sum(dim=1) > 0).long()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
run = Run.get_context()
for epoch in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    run.log("loss", loss.item())
accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
run.log("accuracy", accuracy)
print("size", hvd.size(), "data_dir", args.data_dir, "accuracy", accuracy, flush=True)
Task.current_task().save_model(model, "seed004", example_input=x[:2])
"""


@pytest.mark.slow
@pytest.mark.timeout(2700)  # a fresh machine's first Horovod build: 4 min idle, up to 26 loaded
@needs_mpirun
def test_horovod_seed_trains_and_exports_onnx(seed_project: Path, phalanx_home: Path, tmp_path: Path) -> None:
    """Seed 004 live: its exact call, `import horovod` in the script, ONNX export checked.

    The Horovod wheel is built once per machine (4 min idle, up to 26 on a loaded 2-core machine)
    and cached in ~/.cache/phalanx/wheels, shared by every test run and PHALANX_HOME; like the
    Horovod example test, this test builds it when it is absent (a lock makes concurrent tests wait
    for one build), so the budget below allows for it. The experiment's venv (torch, numpy, the
    ONNX pieces, the wheel) is cached in the shared test venvs folder the example tests use."""
    shared_venvs(phalanx_home)
    (seed_project / "train.py").write_text(textwrap.dedent(HOROVOD_SCRIPT))
    pt_est = PyTorch(
        source_directory=str(seed_project),
        script_params={"--data_dir": str(tmp_path / "data")},
        entry_script="train.py",
        node_count=2,
        process_count_per_node=1,
        distributed_backend="mpi",
    )
    run = Experiment("seed004", project="seed004").submit(pt_est)
    try:
        details = run.wait_for_completion(show_output=False, raise_on_error=False, timeout=2400)
    finally:
        proc = run._process
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    logs = "\n".join(run.get_logs())
    assert details["status"] == "succeeded", f"{details.get('reason')}\n{logs[-4000:]}"
    assert logs.count("size 2 data_dir") == 2  # both ranks imported Horovod and saw a world of 2
    accuracy = run.get_metrics("accuracy")["accuracy"]
    # mpirun's ranks share this machine (LOCAL_WORLD_SIZE 2): one series per rank, as log_metrics
    assert sorted(accuracy) == ["rank 0", "rank 1"]
    assert accuracy["rank 0"]["values"] == accuracy["rank 1"]["values"]  # allreduce kept them equal
    models = {m["name"]: m for m in run.get_models()}
    assert set(models) == {"seed004.pt", "seed004.onnx"}
    assert models["seed004.onnx"]["metadata"]["check"]["passed"] is True


SKLEARN_SCRIPT = """
import sklearn
import torch
from phalanx import Run, Task

model = torch.nn.Linear(4, 2)
Run.get_context().log("sklearn_major", int(sklearn.__version__.split(".")[0]))
Task.current_task().save_model(model, "linear", example_input=torch.randn(3, 4))
print("torch", torch.__version__, flush=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pytorch_estimator_with_its_own_packages_still_has_torch_and_exports_onnx(
    seed_project: Path, phalanx_home: Path
) -> None:
    """``pip_packages=['scikit-learn']`` builds a venv; it still holds torch 2.13.0 and what
    save_model's ONNX export and check import (it once had no torch at all). The venv is cached in
    the shared test venvs folder, so only a machine's first run builds it (about a minute)."""
    shared_venvs(phalanx_home)
    (seed_project / "train.py").write_text(textwrap.dedent(SKLEARN_SCRIPT))
    est = PyTorch(seed_project, entry_script="train.py", pip_packages=["scikit-learn"])
    run = Experiment("sklearn", project="seed004").submit(est)
    try:
        details = run.wait_for_completion(show_output=False, raise_on_error=False, timeout=900)
    finally:
        proc = run._process
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    logs = "\n".join(run.get_logs())
    assert details["status"] == "succeeded", f"{details.get('reason')}\n{logs[-4000:]}"
    assert "torch 2.13.0" in logs
    models = {m["name"]: m for m in run.get_models()}
    assert models["linear.onnx"]["metadata"]["check"]["passed"] is True
