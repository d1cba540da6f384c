"""`phalanx datastore add|ls|rm` and `phalanx data add|ls|get`: the data catalog (phalanx.data)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from phalanx.cli.app import app, emit_json, human_size

datastore_app = typer.Typer(
    help="Named places holding data (a folder, an NFS path, s3://bucket/prefix) that experiments read.",
    no_args_is_help=True,
)
data_app = typer.Typer(
    help="Versioned datasets: immutable, content-addressed file lists experiments name as NAME@VERSION.",
    no_args_is_help=True,
)
app.add_typer(datastore_app, name="datastore")
app.add_typer(data_app, name="data")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
ProjectOpt = Annotated[
    str | None,
    typer.Option(
        "--project",
        metavar="PROJECT",
        help="The project it belongs to (a server's runs of other projects cannot read it).",
    ),
]
SharedOpt = Annotated[bool, typer.Option("--shared", help="Every project's runs may read it.")]


def _store() -> Any:
    from phalanx.config import Settings
    from phalanx.store import open_store

    return open_store(Settings())


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]
    )


@datastore_app.command("add")
def datastore_add(
    name: Annotated[str, typer.Argument(help="A name, e.g. 'digits-store'.")],
    url: Annotated[str, typer.Argument(help="A folder, an NFS path or s3://bucket/prefix.")],
    project: ProjectOpt = None,
    shared: SharedOpt = False,
    profile: Annotated[
        str | None,
        typer.Option("--profile", metavar="NAME", help="The AWS profile a server's runs read it with."),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Register a datastore. Credentials are never stored: a server's runs read it with their
    project's secrets (AWS_ACCESS_KEY_ID, ...) or --profile; other readers with their own."""
    from phalanx.store import catalog

    record = catalog.add_datastore(_store(), name, url, project=project, shared=shared, profile=profile)
    emit_json(record.to_json()) if json_ else typer.echo(f"datastore {record.name} -> {record.url}")


@datastore_app.command("ls")
def datastore_ls(json_: JsonOpt = False) -> None:
    """List the datastores."""
    from phalanx.store import catalog

    records = catalog.list_datastores(_store())
    if json_:
        emit_json([r.to_json() for r in records])
    elif not records:
        typer.echo("no datastores; add one with `phalanx datastore add NAME URL`")
    else:
        typer.echo(_table(["name", "url"], [[r.name, r.url] for r in records]))


@datastore_app.command("rm")
def datastore_rm(
    name: Annotated[str, typer.Argument(help="The datastore to forget (its data stays).")],
) -> None:
    """Forget a datastore (nothing is deleted where it points)."""
    from phalanx.store import catalog

    catalog.remove_datastore(_store(), name)
    typer.echo(f"removed datastore {name}")


@data_app.command("add")
def data_add(
    name: Annotated[str, typer.Argument(help="The dataset's name.")],
    source: Annotated[str, typer.Argument(help="A file or folder, an s3:// URL, or DATASTORE:sub/dir.")],
    copy_to: Annotated[
        str | None,
        typer.Option("--copy-to", metavar="DATASTORE", help="Copy the bytes into this datastore first."),
    ] = None,
    project: ProjectOpt = None,
    shared: SharedOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Record a new version of a dataset (every file's path, size and sha256). Without --copy-to the
    bytes stay where they are and are checked against these hashes whenever they are fetched."""
    from phalanx.store import catalog

    version, new = catalog.add_dataset(_store(), name, source, copy_to, project=project, shared=shared)
    if json_:
        emit_json({**version.to_json(), "new": new})
        return
    where = "copied to" if version.copied else "referenced at"
    state = "recorded" if new else "unchanged: same content as"
    typer.echo(
        f"{state} {version.ref}: {len(version.files)} file(s), {human_size(version.size)}, digest "
        f"{version.digest[:12]}; bytes {where} {version.url}"
    )


@data_app.command("ls")
def data_ls(
    name: Annotated[
        str | None, typer.Argument(help="One dataset's versions (default: every dataset).")
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """List datasets and their versions."""
    from phalanx.store import catalog

    versions = catalog.list_datasets(_store(), name)
    if json_:
        emit_json([v.to_json() for v in versions])
    elif not versions:
        typer.echo("no datasets; record one with `phalanx data add NAME PATH`")
    else:
        rows = [
            [
                v.ref,
                str(len(v.files)),
                human_size(v.size),
                v.digest[:12],
                "copied" if v.copied else "referenced",
                v.url,
            ]
            for v in versions
        ]
        typer.echo(_table(["version", "files", "size", "digest", "bytes", "url"], rows))


@data_app.command("get")
def data_get(
    ref: Annotated[str, typer.Argument(help="NAME, NAME@latest or NAME@VERSION.")],
    directory: Annotated[
        Path | None,
        typer.Option(
            "-d", "--dir", metavar="DIR", help="Copy the files here (checked against their hashes)."
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Show a dataset version and its files, or copy them to --dir (refused if a file changed)."""
    from phalanx.store import catalog
    from phalanx.store.manifest import copy_tree

    version = catalog.get_dataset(_store(), ref)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        copy_tree(version.manifest, str(directory.resolve()), f"dataset {version.ref}")
        emit_json({**version.to_json(), "dir": str(directory)}) if json_ else typer.echo(str(directory))
        return
    if json_:
        emit_json(version.to_json(with_files=True))
        return
    typer.echo(
        f"{version.ref}  digest {version.digest}\nbytes {'copied to' if version.copied else 'referenced at'} "
        f"{version.url}\n{len(version.files)} file(s), {human_size(version.size)}"
    )
    typer.echo(
        _table(["path", "size", "sha256"], [[f.path, str(f.size), f.sha256[:16]] for f in version.files])
    )
