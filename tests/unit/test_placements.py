"""A project's placement on a cluster: its Slurm account and partition reach the sbatch script the
dry run shows (and submit sends); other projects keep the cluster's own settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.clusters import Cluster, add_cluster
from phalanx.config import Settings
from phalanx.errors import UsageError
from phalanx.spec.loader import load_spec_text
from phalanx.store import open_store
from phalanx.store.placements import Placement, list_placements, put, remove
from phalanx.supervisor.preparing import prepare

FILE = "version: 1\nkind: experiment\nproject: {project}\nrun:\n  cmd: python -c pass\n"


def _script(settings: Settings, project: str, tmp_path: Path) -> str:
    spec = load_spec_text(FILE.format(project=project), str(tmp_path / f"{project}.yml"))
    prepared = prepare(spec, settings=settings, cluster="hpc", dry=True, workdir=tmp_path)
    return str(prepared.dry_run.native)


def test_a_projects_account_and_partition_reach_its_sbatch_script(phalanx_home: Path, tmp_path: Path) -> None:
    settings = Settings(home=phalanx_home)
    add_cluster(Cluster("hpc", "slurm", partition="batch", shared_dir=str(tmp_path / "shared")), phalanx_home)
    store = open_store(settings)
    try:
        put(store, Placement("vision", "hpc", account="ml-vision", partition="gpu"))
        assert [p.account for p in list_placements(store, cluster="hpc")] == ["ml-vision"]
        vision = _script(settings, "vision", tmp_path)
        assert "#SBATCH --account=ml-vision" in vision and "#SBATCH --partition=gpu" in vision
        other = _script(settings, "nlp", tmp_path)
        assert "--account" not in other and "#SBATCH --partition=batch" in other
        assert remove(store, "vision", "hpc")
        assert "--account" not in _script(settings, "vision", tmp_path)
    finally:
        store.close()


def test_a_mapping_with_nothing_or_a_bad_value_is_refused(phalanx_home: Path) -> None:
    store = open_store(Settings(home=phalanx_home))
    try:
        with pytest.raises(UsageError, match="give --account"):
            put(store, Placement("vision", "hpc"))
        with pytest.raises(UsageError, match="--account 'a b'"):
            put(store, Placement("vision", "hpc", account="a b"))
        with pytest.raises(UsageError, match="Kubernetes namespace"):
            put(store, Placement("vision", "k8s", namespace="Vision_NS"))
        assert list_placements(store) == []
    finally:
        store.close()
