"""`phalanx cluster add|ls|rm`: name the engines `phalanx run --cluster NAME` can send experiments to,
on this machine or, after `phalanx login` (its admins), on the server (``store.cluster_book``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import Format, emit_json
from phalanx.cli.target import DoorTyper, LocalOpt, ServerOpt, shell_actor

if TYPE_CHECKING:
    from phalanx.store.cluster_book import ClusterBook

cluster_app = DoorTyper(
    help="Register the Slurm, Kubernetes and Ray clusters `phalanx run --cluster NAME` uses.",
    no_args_is_help=True,
)
app.add_typer(cluster_app, name="cluster")


def book(server: str | None, local: bool) -> ClusterBook:
    """The clusters the command acts on: the server's (after `phalanx login`, or with --server),
    else this machine's."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        from phalanx.remote_store import RemoteClusterBook

        return RemoteClusterBook(client)
    from phalanx.config import Settings
    from phalanx.store.cluster_book import LocalClusterBook

    return LocalClusterBook(Settings(), actor=shell_actor())


@cluster_app.command("add")
def add(
    name: str = typer.Argument(..., help="The name to use with --cluster."),
    kind: str = typer.Option(..., "--kind", help="slurm, kubernetes or ray"),
    partition: str | None = typer.Option(None, "--partition", help="slurm: the partition to submit to"),
    namespace: str | None = typer.Option(None, "--namespace", help="kubernetes: namespace (default)"),
    context: str | None = typer.Option(None, "--context", help="kubernetes: kubeconfig context"),
    shared_dir: str | None = typer.Option(
        None, "--shared-dir", help="slurm: a folder all nodes see, for replica logs and exit codes"
    ),
    server_url: str | None = typer.Option(
        None, "--server-url", help="replicas report to this Phalanx server instead of a shared spool"
    ),
    slurm_conf: str | None = typer.Option(None, "--slurm-conf", help="slurm: SLURM_CONF for sbatch/squeue"),
    env_volume: str | None = typer.Option(
        None, "--env-volume", help="kubernetes: a ReadWriteMany PVC where pip environments are built once"
    ),
    kubeflow_api: str | None = typer.Option(
        None,
        "--kubeflow-api",
        help="kubernetes: v1 (training-operator jobs, default) or trainer-v2 (TrainJob)",
    ),
    service_account: str | None = typer.Option(
        None,
        "--service-account",
        help="kubernetes: the service account a server's pods run as (one with no API rights)",
    ),
    address: str | None = typer.Option(
        None, "--address", help="ray: the head's address HOST:PORT (or ray://HOST:10001, Ray Client)"
    ),
    node_dir: str | None = typer.Option(
        None, "--node-dir", help="ray: each node's folder for code and environments (~/.cache/phalanx)"
    ),
    replace: bool = typer.Option(False, "--replace", help="overwrite a cluster of the same name"),
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Register a cluster (on a server: its admins; its paths and contexts are the server machine's)."""
    from phalanx.clusters import Cluster

    # every value is checked by its kind's typed options (phalanx.cluster_options), as a
    # hand-edited clusters.toml is
    cluster = book(server, local).add(
        Cluster(
            name=name,
            kind=kind,
            partition=partition,
            namespace=namespace,
            context=context,
            shared_dir=shared_dir,
            server_url=server_url,
            slurm_conf=slurm_conf,
            env_volume=env_volume,
            kubeflow_api=kubeflow_api,
            service_account=service_account,
            address=address,
            node_dir=node_dir,
        ),
        replace=replace,
    )
    typer.echo(f"cluster {cluster.name!r} ({cluster.kind}) added")
    typer.echo(f"use it with: phalanx run -f FILE --cluster {name}")


@cluster_app.command("ls")
def ls(output: OutputOpt = Format.TABLE, server: ServerOpt = None, local: LocalOpt = False) -> None:
    """List registered clusters."""
    clusters = {c.name: c for c in book(server, local).clusters()}
    if output is Format.JSON:
        emit_json([c.to_json() for c in clusters.values()])
        return
    if not clusters:
        typer.echo("no clusters; add one with: phalanx cluster add NAME --kind slurm|kubernetes|ray")
        return
    rows = [("NAME", "KIND", "WHERE")]
    for c in clusters.values():
        if c.kind == "kubernetes":
            where = f"namespace={c.namespace or 'default'}" + (f" context={c.context}" if c.context else "")
        elif c.kind == "ray":
            where = f"address={c.address}"
        else:
            where = f"partition={c.partition or '(default)'}" + (
                f" conf={c.slurm_conf}" if c.slurm_conf else ""
            )
        rows.append((c.name, c.kind, where))
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        typer.echo("  ".join(v.ljust(width[i]) for i, v in enumerate(r)).rstrip())


@cluster_app.command("rm")
def rm(
    name: str = typer.Argument(..., help="The cluster to forget."),
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Forget a cluster (nothing on the cluster itself is touched)."""
    clusters = book(server, local)
    clusters.remove(name)
    typer.echo(f"cluster {name!r} removed")
