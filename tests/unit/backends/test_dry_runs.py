"""Each engine's dry run is a typed value (its own DryRun subclass, read by attribute) that still
renders in the engine's own format, and an engine refuses to submit another engine's dry run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx.backends.dry_runs import LocalDryRun, SlurmDryRun
from phalanx.backends.kube_objects import KubeDryRun
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.backends.local.engine import LocalBackend
from phalanx.backends.slurm import SlurmBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.errors import UsageError
from tests.unit.backends.conftest import context, plan


def test_the_local_dry_run_is_typed_units_of_processes(tmp_path: Path) -> None:
    dry = LocalBackend(Settings(home=str(tmp_path))).dry_run(plan(workers=1), context())
    assert isinstance(dry, LocalDryRun)
    assert [u.name for u in dry.units] == ["master", "worker-0"]
    master = dry.units[0]
    assert master.replicas == ("master",) and master.cwd == "/work/exp"
    assert "/opt/venv/bin/python -u train.py" in " ".join(master.processes[0].argv)
    assert master.processes[0].env["RANK"] == "0"
    native = json.loads(dry.render())  # the engine's own format: JSON, as before
    assert native == dry.native and native["units"][1]["processes"][0]["env"]["RANK"] == "1"
    assert "# master" in dry.text() and "argv: " in dry.text()


def test_the_slurm_and_kubernetes_dry_runs_carry_their_request(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path))
    slurm = SlurmBackend(
        Cluster(name="s", kind="slurm", shared_dir=str(tmp_path / "shared")), settings
    ).dry_run(plan(), context())
    assert isinstance(slurm, SlurmDryRun) and slurm.format == "sbatch"
    assert slurm.script.startswith("#!") and slurm.render() == slurm.script == slurm.native
    kube = KubernetesBackend(
        settings, Cluster(name="k", kind="kubernetes", namespace="ml", server_url="http://p:8000")
    ).dry_run(plan(), context())
    assert isinstance(kube, KubeDryRun) and kube.format == "yaml"
    assert kube.objects[0]["kind"] == "ConfigMap" and kube.native == list(kube.objects)


def test_an_engine_refuses_a_dry_run_made_by_another(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path))
    local = LocalBackend(settings).dry_run(plan(), context())
    with pytest.raises(UsageError, match="slurm engine cannot submit a dry run made by 'local'"):
        SlurmBackend(Cluster(name="s", kind="slurm", shared_dir=str(tmp_path / "shared")), settings).submit(
            local
        )
