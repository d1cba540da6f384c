"""A home's clusters through its door (store/cluster_book.LocalClusterBook, what the server's
/admin/clusters routes use): nothing an admin types reaches a job's script as a command; a broken
entry of clusters.toml can be replaced or removed and hides only itself; a cluster's projects'
mappings go with it, or with a change of its kind; a Ray cluster takes none."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.clusters import Cluster, clusters_file, load_clusters, usable_clusters
from phalanx.config import Settings
from phalanx.errors import UsageError
from phalanx.store import open_store
from phalanx.store.accounts import Accounts
from phalanx.store.cluster_book import LocalClusterBook
from phalanx.store.placements import Placement


@pytest.fixture
def book(phalanx_home: Path) -> LocalClusterBook:
    return LocalClusterBook(Settings(home=phalanx_home))


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"partition": "gpu\necho pwned"}, "a control character"),
        ({"partition": "gpu;rm -rf /"}, "as sbatch takes it"),
        ({"partition": "gpu part"}, "as sbatch takes it"),
        ({"shared_dir": "/shared\n/x"}, "a control character"),
        ({"slurm_conf": "/etc/slurm.conf\r"}, "a control character"),
    ],
)
def test_a_value_that_would_write_a_line_of_its_own_into_the_script_is_refused(
    book: LocalClusterBook, options: dict[str, str], said: str
) -> None:
    with pytest.raises(UsageError, match=said):
        book.add(Cluster("hpc", "slurm", **options))
    assert book.clusters() == []


def test_a_broken_entry_hides_only_itself_and_its_own_way_out_works(book: LocalClusterBook) -> None:
    book.add(Cluster("hpc", "slurm", partition="gpu"))
    with open(clusters_file(book.home), "a") as f:
        f.write('\n["bad"]\nkind = "kubernetes"\nserver_url = "http://p:8000"\nkubeflow_api = "v3"\n')
    with pytest.raises(UsageError, match=r"\[bad\] kubeflow_api 'v3'.*`phalanx cluster rm bad`"):
        load_clusters(book.home)
    good, broken = usable_clusters(book.home)
    assert list(good) == ["hpc"] and len(broken) == 1 and "[bad]" in broken[0]
    book.add(Cluster("bad", "kubernetes", server_url="http://p:8000"), replace=True)  # as the message says
    assert sorted(c.name for c in book.clusters()) == ["bad", "hpc"]
    with open(clusters_file(book.home), "a") as f:
        f.write('\n["worse"]\nkind = "slurm"\npartition = "a b"\n')
    book.remove("worse")
    assert sorted(c.name for c in book.clusters()) == ["bad", "hpc"]


def test_a_clusters_mappings_go_with_it_or_with_a_change_of_its_kind(book: LocalClusterBook) -> None:
    book.add(Cluster("hpc", "slurm"))
    book.map(Placement("vision", "hpc", account="ml-vision"))
    book.add(Cluster("hpc", "slurm", partition="gpu"), replace=True)  # the same kind: kept
    assert [p.account for p in book.maps("hpc")] == ["ml-vision"]
    book.remove("hpc")
    assert book.maps() == []
    book.add(Cluster("hpc", "slurm"))  # a new cluster under the old name starts with no mapping
    assert book.maps("hpc") == []
    book.map(Placement("vision", "hpc", account="ml-vision"))
    book.add(Cluster("hpc", "kubernetes", server_url="http://p:8000"), replace=True)
    assert book.maps() == []  # a Slurm account means nothing to a Kubernetes cluster


def test_a_ray_cluster_takes_no_mapping(book: LocalClusterBook) -> None:
    book.add(Cluster("pool", "ray", address="head:6379", server_url="http://p:8000"))
    with pytest.raises(UsageError, match="pool is a ray cluster"):
        book.map(Placement("vision", "pool", account="a"))
    assert book.maps() == []


def test_a_change_made_on_this_machine_is_audited_as_its_shell_login(phalanx_home: Path) -> None:
    book = LocalClusterBook(Settings(home=phalanx_home), actor="cli:ada")
    book.add(Cluster("hpc", "slurm"))
    book.add(Cluster("hpc", "kubernetes", server_url="http://p:8000"), replace=True)
    book.map(Placement("vision", "hpc", namespace="vision"))
    book.unmap("vision", "hpc")
    book.remove("hpc")
    store = open_store(Settings(home=phalanx_home))
    try:
        trail = [(r.actor, r.action, r.target, r.detail) for r in Accounts(store).audit_trail(10)]
    finally:
        store.close()
    assert trail == [
        ("cli:ada", "cluster.add", "hpc", "slurm"),
        ("cli:ada", "cluster.add", "hpc", "kubernetes, previous: slurm"),
        ("cli:ada", "cluster.map", "hpc/vision", "namespace vision"),
        ("cli:ada", "cluster.unmap", "hpc/vision", None),
        ("cli:ada", "cluster.remove", "hpc", None),
    ]
