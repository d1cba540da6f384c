"""The clusters a home sends experiments to, and where each project's jobs go on them (`phalanx
cluster add|ls|rm|map|unmap|maps`), through one door: ``ClusterBook``.

``LocalClusterBook`` is this machine's: its home's ``clusters.toml`` and its store's placements.
``remote_store.RemoteClusterBook`` is a server's, through its API (``/admin/clusters``,
``/admin/placements``: its admins only, each change audited), so an admin registers the server's
clusters and maps its projects from a laptop after `phalanx login`. A cluster's paths and contexts
(``--slurm-conf``, ``--shared-dir``, a kube context) are those of the machine whose book it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from phalanx.clusters import Cluster, add_cluster, cluster_kinds, get_cluster, load_clusters, remove_cluster
from phalanx.config import Settings
from phalanx.errors import NotFound, UsageError
from phalanx.store import open_store
from phalanx.store.accounts import Accounts
from phalanx.store.base import LocalStore
from phalanx.store.placements import Placement, list_placements, put, remove


class ClusterBook(Protocol):
    """What the cluster commands ask of a home, this machine's or a server's."""

    def clusters(self) -> list[Cluster]: ...

    def add(self, cluster: Cluster, replace: bool = False) -> Cluster: ...

    def remove(self, name: str) -> None: ...

    def map(self, placement: Placement) -> Placement: ...

    def unmap(self, project: str, cluster: str) -> None: ...

    def maps(self, cluster: str | None = None) -> list[Placement]: ...


class LocalClusterBook:
    """A home's clusters (its ``clusters.toml``) and its store's placements: ``store`` (a server's,
    open), or else one opened for each call that reads or writes a placement (a command).
    ``actor``: who each change is audited as (a command's ``cli:NAME``; None: the caller audits,
    as the server's routes do with the request's principal)."""

    def __init__(self, settings: Settings, store: LocalStore | None = None, actor: str | None = None) -> None:
        self.settings = settings
        self.store = store
        self.actor = actor

    @property
    def home(self) -> Path:
        return self.settings.home

    @contextlib.contextmanager
    def _placements(self) -> Iterator[LocalStore]:
        if self.store is not None:
            yield self.store
            return
        store = open_store(self.settings)
        try:
            yield store
        finally:
            store.close()

    def clusters(self) -> list[Cluster]:
        return list(load_clusters(self.home).values())

    def add(self, cluster: Cluster, replace: bool = False) -> Cluster:
        """Register a cluster; one replaced by another kind loses its projects' mappings (what a
        Slurm account meant is nothing to a Kubernetes cluster)."""
        before = self.kind_of(cluster.name)
        added = add_cluster(cluster, self.home, replace=replace)
        if before is not None and before != added.kind:
            self._forget_mappings(added.name)
        self._audit(
            "cluster.add",
            added.name,
            None,
            added.kind if before is None else f"{added.kind}, previous: {before}",
        )
        return added

    def remove(self, name: str) -> None:
        """Forget a cluster and its projects' mappings (a cluster added later under that name
        starts with none)."""
        remove_cluster(name, self.home)
        self._forget_mappings(name)
        self._audit("cluster.remove", name)

    def kind_of(self, name: str) -> str | None:
        """The kind a cluster's entry says, as written (None: no such entry)."""
        return cluster_kinds(self.home).get(name)

    def _audit(self, action: str, target: str, project: str | None = None, detail: str | None = None) -> None:
        if self.actor is not None:
            with self._placements() as store:
                Accounts(store).audit(self.actor, action, target, project, detail)

    def _forget_mappings(self, cluster: str) -> None:
        with self._placements() as store:
            for p in list_placements(store, cluster=cluster):
                remove(store, p.project, cluster)

    def map(self, placement: Placement) -> Placement:
        """Send the project's jobs on a registered cluster to an account, partition or namespace
        (what the cluster's kind takes); replaces an earlier mapping."""
        kind = get_cluster(placement.cluster, self.home).kind
        if kind == "ray":
            raise UsageError(
                f"{placement.cluster} is a ray cluster: its actors run as the Ray cluster's own user and"
                " take no account, partition or namespace; map a slurm or kubernetes cluster"
            )
        if kind == "slurm" and placement.namespace is not None:
            raise UsageError(
                f"--namespace is for kubernetes clusters; {placement.cluster} is a slurm cluster"
            )
        if kind == "kubernetes" and (placement.account is not None or placement.partition is not None):
            raise UsageError(
                "--account and --partition are for slurm clusters;"
                f" {placement.cluster} is a kubernetes cluster"
            )
        with self._placements() as store:
            done = put(store, placement)
        self._audit("cluster.map", f"{done.cluster}/{done.project}", done.project, done.summary())
        return done

    def unmap(self, project: str, cluster: str) -> None:
        with self._placements() as store:
            removed = remove(store, project, cluster)
        if not removed:
            raise NotFound(f"project {project} has no mapping on {cluster} (`phalanx cluster maps`)")
        self._audit("cluster.unmap", f"{cluster}/{project}", project)

    def maps(self, cluster: str | None = None) -> list[Placement]:
        with self._placements() as store:
            return list_placements(store, cluster=cluster)
