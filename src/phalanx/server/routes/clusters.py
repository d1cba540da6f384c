"""The server's clusters and where each project's jobs go on them (docs/clusters.md), for its admins:
``GET``/``POST /admin/clusters``, ``DELETE /admin/clusters/{name}``, ``GET /admin/placements``,
``PUT``/``DELETE /admin/placements/{cluster}/{project}``. What `phalanx cluster add|ls|rm|map|
unmap|maps` does where the server's home is, through one door (``store.cluster_book``); each
change is audited. Members see the targets they may submit to in ``GET /targets`` and the queue."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from phalanx.clusters import Cluster
from phalanx.server.audit import describe
from phalanx.server.deps import StoreDep
from phalanx.server.policy import policy
from phalanx.store.cluster_book import LocalClusterBook
from phalanx.store.placements import Placement

router = APIRouter(tags=["clusters"])

# generous bounds: a value the domain would refuse is refused by its checks, in the words this
# machine's `phalanx cluster` uses (the same answer on both doors); these only cap a request's size
_VALUE = Field(default=None, max_length=4096)


class ClusterIn(BaseModel):
    """A cluster as `phalanx cluster add` takes it (paths and contexts are the server machine's)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=4096)
    kind: str = Field(max_length=4096, description="slurm, kubernetes or ray")
    partition: str | None = _VALUE
    account: str | None = _VALUE
    namespace: str | None = _VALUE
    context: str | None = _VALUE
    shared_dir: str | None = _VALUE
    server_url: str | None = _VALUE
    slurm_conf: str | None = _VALUE
    env_volume: str | None = _VALUE
    kubeflow_api: str | None = _VALUE
    service_account: str | None = _VALUE
    address: str | None = _VALUE
    node_dir: str | None = _VALUE
    replace: StrictBool = Field(default=False, description="overwrite a cluster of the same name")


class PlacementIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account: str | None = Field(default=None, max_length=4096, description="slurm: --account")
    partition: str | None = Field(default=None, max_length=4096, description="slurm: --partition")
    namespace: str | None = Field(default=None, max_length=4096, description="kubernetes: the namespace")


def _book(request: Request, store: StoreDep) -> LocalClusterBook:
    return LocalClusterBook(request.app.state.settings.store, store)


@router.get("/admin/clusters")
@policy("site:admin")
def list_clusters(request: Request, store: StoreDep) -> list[dict[str, Any]]:
    """The server's clusters, each with the options it was added with."""
    return [c.to_json() for c in _book(request, store).clusters()]


@router.post("/admin/clusters", status_code=201)
@policy("site:admin")
def add_cluster(body: ClusterIn, request: Request, store: StoreDep) -> dict[str, Any]:
    """Register a cluster (checked as `phalanx cluster add` checks it); 409 for a name in use
    without ``replace``."""
    fields = body.model_dump(exclude={"replace"})
    book = _book(request, store)
    before = book.kind_of(body.name)
    cluster = book.add(Cluster(**fields), replace=body.replace)
    detail = cluster.kind if before is None else f"{cluster.kind}, previous: {before}"
    describe(request, "cluster.add", cluster.name, None, detail)
    return cluster.to_json()


@router.delete("/admin/clusters/{name}", status_code=204)
@policy("site:admin")
def remove_cluster(name: str, request: Request, store: StoreDep) -> Response:
    """Forget a cluster (nothing on the cluster itself is touched)."""
    _book(request, store).remove(name)
    describe(request, "cluster.remove", name)
    return Response(status_code=204)


@router.get("/admin/placements")
@policy("site:admin")
def list_placements(
    request: Request, store: StoreDep, cluster: str | None = Query(default=None, max_length=4096)
) -> list[dict[str, Any]]:
    """The projects' mappings (only ``cluster``'s, when given)."""
    return [p.to_json() for p in _book(request, store).maps(cluster)]


@router.put("/admin/placements/{cluster}/{project}")
@policy("site:admin")
def map_project(
    cluster: str, project: str, body: PlacementIn, request: Request, store: StoreDep
) -> dict[str, Any]:
    """Send the project's jobs on the cluster to this account, partition or namespace."""
    placement = Placement(project, cluster, body.account, body.partition, body.namespace)
    done = _book(request, store).map(placement)
    describe(request, "cluster.map", f"{cluster}/{project}", project, done.summary())
    return done.to_json()


@router.delete("/admin/placements/{cluster}/{project}", status_code=204)
@policy("site:admin")
def unmap_project(cluster: str, project: str, request: Request, store: StoreDep) -> Response:
    """Remove the project's mapping on the cluster (its jobs use the cluster's own settings)."""
    _book(request, store).unmap(project, cluster)
    describe(request, "cluster.unmap", f"{cluster}/{project}", project)
    return Response(status_code=204)
