"""Where a project's jobs go on a registered cluster, seen through the Store: the Slurm account and
partition, the Kubernetes namespace, so that the cluster's own accounting charges the project.
``placed`` applies a project's placement to a cluster's settings (the launch path calls it, so the
dry run shows the ``#SBATCH --account`` or namespace that is sent)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from phalanx.errors import UsageError
from phalanx.store.sql import placements
from phalanx.tracking.labels import label_problem

if TYPE_CHECKING:
    from phalanx.clusters import Cluster
    from phalanx.store.base import LocalStore

_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.,-]{0,199}$")  # what sbatch and Kubernetes names accept
_NAMESPACE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")  # an RFC 1123 label


@dataclass(frozen=True)
class Placement:
    project: str
    cluster: str
    account: str | None = None
    partition: str | None = None
    namespace: str | None = None

    def summary(self) -> str:
        """What it sets, e.g. "account ml-vision, partition gpu"."""
        chosen = (("account", self.account), ("partition", self.partition), ("namespace", self.namespace))
        return ", ".join(f"{k} {v}" for k, v in chosen if v)

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "cluster": self.cluster,
            "account": self.account,
            "partition": self.partition,
            "namespace": self.namespace,
        }


def check(p: Placement) -> Placement:
    problem = label_problem(p.project, "project")
    if problem:
        raise UsageError(problem)
    for what, value in (("--account", p.account), ("--partition", p.partition)):
        if value is not None and not _VALUE.match(value):
            raise UsageError(f"{what} {value!r}: letters, digits, '_', '.', ',' and '-' only")
    if p.namespace is not None and not _NAMESPACE.match(p.namespace):
        raise UsageError(f"--namespace {p.namespace!r}: a Kubernetes namespace (lower case, digits, '-')")
    if p.account is None and p.partition is None and p.namespace is None:
        raise UsageError(
            "give --account, --partition or --namespace (to remove one: `phalanx cluster unmap`)"
        )
    return p


def put(store: LocalStore, placement: Placement) -> Placement:
    placement = check(placement)
    placements.put(
        store.engine,
        (placement.project, placement.cluster, placement.account, placement.partition, placement.namespace),
    )
    return placement


def list_placements(
    store: LocalStore, project: str | None = None, cluster: str | None = None
) -> list[Placement]:
    return [Placement(*row) for row in placements.list_placements(store.engine, project, cluster)]


def remove(store: LocalStore, project: str, cluster: str) -> bool:
    return placements.remove(store.engine, project, cluster)


def placed(cluster: Cluster, project: str, store: LocalStore | None) -> Cluster:
    """The cluster's settings for the project's jobs: its placement's account, partition or namespace
    where it has one, the cluster's own otherwise."""
    if store is None:
        return cluster
    found = list_placements(store, project, cluster.name)
    if not found:
        return cluster
    p = found[0]
    return replace(
        cluster,
        account=p.account or cluster.account,
        partition=p.partition or cluster.partition,
        namespace=p.namespace or cluster.namespace,
    )
