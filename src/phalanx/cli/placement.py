"""`phalanx cluster map|unmap|maps`: where a project's jobs go on a registered cluster (a Slurm
account and partition, a Kubernetes namespace), so the cluster's own accounting charges the project."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import OutputOpt, emit_json
from phalanx.cli.cluster import TARGETS_HERE, cluster_app
from phalanx.cli.target import ThisMachineOnlyOpt, this_machine_only
from phalanx.cli.tracking import Format

if TYPE_CHECKING:
    from phalanx.store.base import LocalStore


def _store() -> LocalStore:
    from phalanx.config import Settings
    from phalanx.store import open_store

    return open_store(Settings())


@cluster_app.command("map")
def map_project(
    cluster: Annotated[str, typer.Argument(help="a registered cluster (`phalanx cluster ls`)")],
    project: Annotated[str, typer.Argument(help="the project whose jobs it places")],
    account: Annotated[str | None, typer.Option("--account", help="slurm: --account")] = None,
    partition: Annotated[str | None, typer.Option("--partition", help="slurm: --partition")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", help="kubernetes: the namespace")] = None,
    server: ThisMachineOnlyOpt = None,
) -> None:
    """Send the project's jobs on CLUSTER to this account, partition or namespace (replaces an
    earlier mapping; what is not given stays the cluster's own)."""
    this_machine_only("cluster map", server, TARGETS_HERE)
    from phalanx.clusters import get_cluster
    from phalanx.config import Settings
    from phalanx.errors import UsageError
    from phalanx.store.placements import Placement, put

    conf = get_cluster(cluster, Settings().home)
    if conf.kind == "slurm" and namespace is not None:
        raise UsageError(f"--namespace is for kubernetes clusters; {cluster} is a slurm cluster")
    if conf.kind == "kubernetes" and (account is not None or partition is not None):
        raise UsageError(
            f"--account and --partition are for slurm clusters; {cluster} is a kubernetes cluster"
        )
    done = put(_store(), Placement(project, cluster, account, partition, namespace))
    said = ", ".join(f"{k} {v}" for k, v in done.to_json().items() if k not in ("project", "cluster") and v)
    typer.echo(f"project {project} on {cluster}: {said}")


@cluster_app.command("unmap")
def unmap_project(
    cluster: Annotated[str, typer.Argument(help="the cluster")],
    project: Annotated[str, typer.Argument(help="the project")],
    server: ThisMachineOnlyOpt = None,
) -> None:
    """Remove the project's mapping on CLUSTER (its jobs use the cluster's own settings again)."""
    this_machine_only("cluster unmap", server, TARGETS_HERE)
    from phalanx.errors import NotFound
    from phalanx.store.placements import remove

    if not remove(_store(), project, cluster):
        raise NotFound(f"project {project} has no mapping on {cluster} (`phalanx cluster maps`)")
    typer.echo(f"project {project} on {cluster}: the cluster's own settings")


@cluster_app.command("maps")
def list_maps(
    cluster: Annotated[str | None, typer.Argument(help="only this cluster")] = None,
    output: OutputOpt = Format.TABLE,
    server: ThisMachineOnlyOpt = None,
) -> None:
    """List the projects' mappings."""
    this_machine_only("cluster maps", server, TARGETS_HERE)
    from phalanx.cli.tracking import _table
    from phalanx.store.placements import list_placements

    found = list_placements(_store(), cluster=cluster)
    if output is Format.JSON:
        emit_json([p.to_json() for p in found])
        return
    if not found:
        typer.echo("no mappings (`phalanx cluster map CLUSTER PROJECT --account A`)")
        return
    rows = [[p.cluster, p.project, p.account or "-", p.partition or "-", p.namespace or "-"] for p in found]
    typer.echo(_table(["cluster", "project", "account", "partition", "namespace"], rows))
