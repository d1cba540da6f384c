"""`phalanx cluster map|unmap|maps`: where a project's jobs go on a registered cluster (a Slurm
account and partition, a Kubernetes namespace), so the cluster's own accounting charges the project."""

from __future__ import annotations

from typing import Annotated

import typer

from phalanx.cli.app import OutputOpt
from phalanx.cli.cluster import book, cluster_app
from phalanx.cli.listing import emit_json
from phalanx.cli.target import LocalOpt, ServerOpt
from phalanx.cli.tracking import Format


@cluster_app.command("map")
def map_project(
    cluster: Annotated[str, typer.Argument(help="a registered cluster (`phalanx cluster ls`)")],
    project: Annotated[str, typer.Argument(help="the project whose jobs it places")],
    account: Annotated[str | None, typer.Option("--account", help="slurm: --account")] = None,
    partition: Annotated[str | None, typer.Option("--partition", help="slurm: --partition")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", help="kubernetes: the namespace")] = None,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Send the project's jobs on CLUSTER to this account, partition or namespace (replaces an
    earlier mapping; what is not given stays the cluster's own)."""
    from phalanx.store.placements import Placement

    done = book(server, local).map(Placement(project, cluster, account, partition, namespace))
    typer.echo(f"project {project} on {cluster}: {done.summary()}")


@cluster_app.command("unmap")
def unmap_project(
    cluster: Annotated[str, typer.Argument(help="the cluster")],
    project: Annotated[str, typer.Argument(help="the project")],
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Remove the project's mapping on CLUSTER (its jobs use the cluster's own settings again)."""
    book(server, local).unmap(project, cluster)
    typer.echo(f"project {project} on {cluster}: the cluster's own settings")


@cluster_app.command("maps")
def list_maps(
    cluster: Annotated[str | None, typer.Argument(help="only this cluster")] = None,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """List the projects' mappings."""
    from phalanx.cli.tracking import _table

    found = book(server, local).maps(cluster)
    if output is Format.JSON:
        emit_json([p.to_json() for p in found])
        return
    if not found:
        typer.echo("no mappings (`phalanx cluster map CLUSTER PROJECT --account A`)")
        return
    rows = [[p.cluster, p.project, p.account or "-", p.partition or "-", p.namespace or "-"] for p in found]
    typer.echo(_table(["cluster", "project", "account", "partition", "namespace"], rows))
