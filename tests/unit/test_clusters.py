"""Named clusters in PHALANX_HOME/clusters.toml: round trip, engine choice, broken files."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.clusters import Cluster, add_cluster, get_cluster, load_clusters, remove_cluster
from phalanx.errors import NotFound, UsageError


def test_a_cluster_round_trips_through_the_file_with_awkward_values(tmp_path: Path) -> None:
    c = Cluster(
        name="hpc.eu-1",
        kind="slurm",
        partition='gpu "a"',
        shared_dir="/shared/ü dir",
        slurm_conf="/etc/s.conf",
    )
    add_cluster(c, tmp_path)
    assert get_cluster("hpc.eu-1", tmp_path) == c


def test_the_engine_follows_the_cluster_kind_and_the_files_backend() -> None:
    slurm = Cluster(name="s", kind="slurm")
    kube = Cluster(name="k", kind="kubernetes")
    assert slurm.backend_for("kubeflow") == "slurm"
    assert kube.backend_for(None) == "kubernetes"
    assert kube.backend_for("native") == "kubernetes"
    assert kube.backend_for("kubeflow") == "kubeflow"
    assert kube.backend_for("mpi") == "kubeflow"


def test_replace_overwrites_and_remove_forgets(tmp_path: Path) -> None:
    add_cluster(Cluster(name="a", kind="slurm"), tmp_path)
    add_cluster(Cluster(name="a", kind="slurm", partition="p"), tmp_path, replace=True)
    assert get_cluster("a", tmp_path).partition == "p"
    remove_cluster("a", tmp_path)
    assert load_clusters(tmp_path) == {}
    with pytest.raises(NotFound, match="phalanx cluster add"):
        get_cluster("a", tmp_path)


def test_a_hand_edited_file_with_mistakes_is_a_clear_usage_error(tmp_path: Path) -> None:
    (tmp_path / "clusters.toml").write_text('[a]\nkind = "slurm"\npartiton = "x"\n')
    with pytest.raises(UsageError, match=r"unknown keys \['partiton'\]"):
        load_clusters(tmp_path)
    (tmp_path / "clusters.toml").write_text("[a\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_clusters(tmp_path)
