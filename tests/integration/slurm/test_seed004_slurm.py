"""Seed 004 on the local two-node Slurm cluster: the seed's own PyTorch estimator call with
``compute_target`` naming the cluster is Horovod over MPI (one rank per node), the script's
``Run.get_context()`` reports from both ranks, and rank 0 exports a checked ONNX model.

The experiment's venv comes from the machine's test venv cache and the Horovod wheel from
~/.cache/phalanx/wheels, built on first use like the Horovod tests in test_frameworks_live.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tests.integration.estimator.test_seed004 import HOROVOD_SCRIPT
from tests.support.slurm import LocalSlurm

from phalanx import PyTorch
from phalanx.clusters import add_cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, Framework

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(2700)]


def test_seed004s_mpi_estimator_runs_horovod_on_two_slurm_nodes(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path
) -> None:
    from phalanx.runner import LaunchOptions, Runner
    from phalanx.store import open_store

    settings = Settings()
    add_cluster(slurm_cluster.cluster(), settings.home, replace=True)
    source = tmp_path / "my-pytorch-proj"
    source.mkdir()
    (source / "train.py").write_text(textwrap.dedent(HOROVOD_SCRIPT))
    pt_est = PyTorch(
        source_directory=str(source),
        script_params={"--data_dir": str(tmp_path)},
        compute_target=slurm_cluster.name,
        entry_script="train.py",
        node_count=2,
        process_count_per_node=1,
        distributed_backend="mpi",
    )
    spec = pt_est.to_spec(name="seed004")
    assert spec.framework is Framework.HOROVOD
    store = open_store(settings)
    options = LaunchOptions(cluster=pt_est.compute_target, workdir=source)
    outcome = Runner(settings).run(spec, options, handle_signals=False, store=store)
    lines = [(line.replica, line.text) for line in store.logs(outcome.experiment_id)]
    assert outcome.status is ExperimentStatus.SUCCEEDED, f"{outcome.reason}\n{lines[-30:]}"
    replicas = {r.name: r.host for r in store.list_replicas(outcome.experiment_id)}
    assert replicas == {"master": "n1", "worker-0": "n2"}
    assert sum("size 2 data_dir" in text for _, text in lines) == 2  # both ranks imported Horovod
    accuracy = store.metrics(outcome.experiment_id)["accuracy"]
    assert len(accuracy) == 2  # Run.get_context().log from each rank, one series each
    first, second = (s.values for s in accuracy.values())
    assert first == second  # allreduce kept the models identical
    models = {m.name: m for m in store.models(outcome.experiment_id)}
    assert models["seed004.onnx"].metadata["check"]["passed"] is True
    assert slurm_cluster.wait_queue_empty() == []
