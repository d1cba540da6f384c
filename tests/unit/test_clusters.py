"""Named clusters in PHALANX_HOME/clusters.toml: round trip, engine choice, broken files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from phalanx.clusters import Cluster, add_cluster, get_cluster, load_clusters, remove_cluster
from phalanx.errors import NotFound, UsageError


def test_a_cluster_round_trips_through_the_file_with_awkward_values(tmp_path: Path) -> None:
    c = Cluster(
        name="hpc.eu-1",
        kind="slurm",
        partition="gpu-a,b.c",
        shared_dir='/shared/ü "dir"',
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


def test_each_kind_has_typed_options_with_its_own_fields() -> None:
    from phalanx.cluster_options import KubernetesOptions, SlurmOptions

    slurm = Cluster(name="s", kind="slurm", partition="gpu", shared_dir="/shared/p").options
    assert isinstance(slurm, SlurmOptions) and (slurm.partition, slurm.shared_dir) == ("gpu", "/shared/p")
    kube = Cluster(name="k", kind="kubernetes", namespace="ml", server_url="http://p:8000").options
    assert isinstance(kube, KubernetesOptions) and kube.kubeflow_api is None and kube.namespace == "ml"


@pytest.mark.parametrize(
    ("cluster", "said"),
    [
        (
            Cluster(name="k", kind="kubernetes", server_url="http://p:8000", namespace="ML_team"),
            "namespace 'ML_team'",
        ),
        (Cluster(name="k", kind="kubernetes", server_url="p:8000"), "give the server's URL"),
        (
            Cluster(name="k", kind="kubernetes", server_url="http://p", env_volume="Envs!"),
            "env_volume 'Envs!'",
        ),
        (Cluster(name="s", kind="slurm", shared_dir="shared"), "give an absolute path"),
        (Cluster(name="s", kind="slurm", slurm_conf="etc/slurm.conf"), "slurm_conf 'etc/slurm.conf'"),
        (Cluster(name="s", kind="slurm", partition=""), "partition '': use letters, digits"),
        (
            Cluster(name="r", kind="ray", address="gpu-box-1", server_url="http://b:8000"),
            "address 'gpu-box-1': give the Ray head's address as HOST:PORT",
        ),
        (
            Cluster(name="r", kind="ray", address="b:6379", server_url="http://b:8000", node_dir="cache"),
            "node_dir 'cache': give an absolute path",
        ),
    ],
)
def test_a_bad_value_is_refused_with_where_what_and_how_and_nothing_is_written(
    tmp_path: Path, cluster: Cluster, said: str
) -> None:
    with pytest.raises(UsageError, match=f"cluster '{cluster.name}': .*{said}"):
        add_cluster(cluster, tmp_path)
    assert not (tmp_path / "clusters.toml").exists()


def test_a_hand_edited_bad_value_gets_the_same_check_naming_the_file_and_table(tmp_path: Path) -> None:
    path = tmp_path / "clusters.toml"
    path.write_text('[k]\nkind = "kubernetes"\nserver_url = "http://p:8000"\nnamespace = "Team A"\n')
    with pytest.raises(UsageError) as refused:
        load_clusters(tmp_path)
    text = str(refused.value)
    assert text.startswith(f"{path}: [k] namespace 'Team A':"), text
    assert "phalanx cluster add k --replace" in text
    path.write_text('[k]\nkind = "kubernetes"\n')
    with pytest.raises(UsageError, match=r"\[k\] server_url: is required"):
        load_clusters(tmp_path)


def test_a_ray_cluster_names_its_head_and_the_server_its_nodes_reach(tmp_path: Path) -> None:
    from phalanx.cluster_options import RayOptions

    pool = Cluster(name="pool", kind="ray", address="gpu-box-1:6379", server_url="http://gpu-box-1:8000")
    add_cluster(pool, tmp_path)
    assert get_cluster("pool", tmp_path) == pool and pool.backend_for("kubeflow") == "ray"
    options = pool.options
    assert isinstance(options, RayOptions) and options.address == "gpu-box-1:6379"
    client = Cluster(name="c", kind="ray", address="ray://head:10001", server_url="http://head:8000")
    assert isinstance(client.options, RayOptions)
    with pytest.raises(UsageError, match=r"a ray cluster needs --address .* and --server-url"):
        add_cluster(Cluster(name="r", kind="ray", address="b:6379"), tmp_path)
    with pytest.raises(UsageError, match="--address: for ray clusters, not slurm"):
        add_cluster(Cluster(name="s", kind="slurm", address="b:6379"), tmp_path)
    with pytest.raises(UsageError, match="--partition: for slurm clusters, not ray"):
        add_cluster(replace(pool, name="p2", partition="gpu"), tmp_path)
    assert sorted(load_clusters(tmp_path)) == ["pool"]  # nothing refused was written
