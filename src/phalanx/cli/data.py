"""`phalanx datastore add|ls|rm` and `phalanx data add|ls|get|rm`: the data catalog (phalanx.data),
on this machine or, after `phalanx login` (or with --server), on the server (``Catalog``: one door
each; the server applies its project rules)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.cli.app import OutputOpt, YesOpt, app, confirm
from phalanx.cli.listing import Format, emit_json
from phalanx.cli.record_tables import human_size
from phalanx.cli.target import DoorTyper, LocalOpt, ServerOpt
from phalanx.config import Settings
from phalanx.logins import choose

if TYPE_CHECKING:
    from phalanx.apiclient import Client
    from phalanx.store.catalog import Catalog, DatasetVersion

datastore_app = DoorTyper(
    help="Named places holding data (a folder, an NFS path, s3://bucket/prefix) that experiments read.",
    no_args_is_help=True,
)
data_app = DoorTyper(
    help="Versioned datasets: immutable, content-addressed file lists experiments name as NAME@VERSION.",
    no_args_is_help=True,
)
app.add_typer(datastore_app, name="datastore")
app.add_typer(data_app, name="data")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (as -o json).")]
ProjectOpt = Annotated[
    str | None,
    typer.Option(
        "--project",
        metavar="PROJECT",
        help="The project it belongs to (a server's runs of other projects cannot read it).",
    ),
]
SharedOpt = Annotated[bool, typer.Option("--shared", help="Every project's runs may read it.")]


def _client(server: str | None, local: bool) -> Client | None:
    """The server's client (a login, or --server), or None for this machine; says which once a
    server is in play."""
    return choose(server, local)


@contextlib.contextmanager
def _opened(client: Client | None) -> Iterator[Catalog]:
    from phalanx.data.remote import open_catalog  # why: `phalanx --help` stays fast: no SQLAlchemy

    catalog = open_catalog(client, Settings())
    try:
        yield catalog
    finally:
        catalog.close()


def _open(server: str | None, local: bool) -> contextlib.AbstractContextManager[Catalog]:
    return _opened(_client(server, local))


def _json(output: Format, json_: bool) -> bool:
    return json_ or output is Format.JSON


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]
    )


@datastore_app.command("add")
def datastore_add(
    name: Annotated[str, typer.Argument(help="A name, e.g. 'digits-store'.")],
    url: Annotated[
        str, typer.Argument(help="A folder, an NFS path or s3://bucket/prefix (on a server: its machine's).")
    ],
    project: ProjectOpt = None,
    shared: SharedOpt = False,
    profile: Annotated[
        str | None,
        typer.Option("--profile", metavar="NAME", help="The AWS profile a server's runs read it with."),
    ] = None,
    output: OutputOpt = Format.TABLE,
    json_: JsonOpt = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Register a datastore. Credentials are never stored: a server's runs read it with their
    project's secrets (AWS_ACCESS_KEY_ID, ...) or --profile; other readers with their own."""
    with _open(server, local) as catalog:
        record = catalog.add_datastore(name, url, project=project, shared=shared, profile=profile)
    emit_json(record.to_json()) if _json(output, json_) else typer.echo(
        f"datastore {record.name} -> {record.url}"
    )


@datastore_app.command("ls")
def datastore_ls(
    output: OutputOpt = Format.TABLE,
    json_: JsonOpt = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """List the datastores (on a server: your projects' and the shared ones)."""
    with _open(server, local) as catalog:
        records = catalog.datastores()
    if _json(output, json_):
        emit_json([r.to_json() for r in records])
    elif not records:
        typer.echo("no datastores; add one with `phalanx datastore add NAME URL`")
    else:
        rows = [[r.name, r.project or ("shared" if r.shared else "-"), r.url] for r in records]
        typer.echo(_table(["name", "project", "url"], rows))


@datastore_app.command("rm")
def datastore_rm(
    name: Annotated[str, typer.Argument(help="The datastore to forget (its data stays).")],
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Forget a datastore (nothing is deleted where it points)."""
    from phalanx.spec.inputs import check_catalog_name

    check_catalog_name(name, "datastore")  # what cannot be a name is said as such, on both doors
    with _open(server, local) as catalog:
        catalog.remove_datastore(name)
    typer.echo(f"removed datastore {name}")


@data_app.command("add")
def data_add(
    name: Annotated[str, typer.Argument(help="The dataset's name.")],
    source: Annotated[
        str,
        typer.Argument(
            help="DATASTORE:sub/dir, a file or folder, or an s3:// URL (on a server: DATASTORE:sub/dir)."
        ),
    ],
    copy_to: Annotated[
        str | None,
        typer.Option(
            "--copy-to",
            metavar="DATASTORE",
            help="Copy the bytes into this datastore (default: the catalog's own folder).",
        ),
    ] = None,
    reference: Annotated[
        bool,
        typer.Option(
            "--reference",
            help="Leave the bytes where they are: every fetch checks them, and a changed file is refused.",
        ),
    ] = False,
    project: ProjectOpt = None,
    shared: SharedOpt = False,
    output: OutputOpt = Format.TABLE,
    json_: JsonOpt = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Record a new version of a dataset (every file's path, size and sha256). Its bytes are copied,
    checked, into the catalog's own folder (or --copy-to DATASTORE), so the version stays fetchable
    whatever later happens to SOURCE; --reference leaves them there, checked on every fetch."""
    with _open(server, local) as catalog:
        version, new = catalog.add_dataset(
            name, source, copy_to=copy_to, project=project, shared=shared, reference=reference
        )
    if _json(output, json_):
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
    output: OutputOpt = Format.TABLE,
    json_: JsonOpt = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """List datasets and their versions (on a server: your projects' and the shared ones)."""
    from phalanx.spec.inputs import check_catalog_name

    if name is not None:
        check_catalog_name(name, "dataset")  # '' is no name: said, not 'no dataset' with an empty command
    with _open(server, local) as catalog:
        versions = catalog.datasets(name)
        if name is not None and not versions:  # the same on both doors: among the names one may see
            from phalanx.store.catalog import no_dataset

            raise no_dataset(name, {v.name for v in catalog.datasets()})
    if _json(output, json_):
        emit_json([v.to_json() for v in versions])
    elif not versions:
        typer.echo("no datasets; record one with `phalanx data add NAME PATH`")
    else:
        typer.echo(
            _table(["version", "files", "size", "digest", "bytes", "url"], [_row(v) for v in versions])
        )


def _row(v: DatasetVersion) -> list[str]:
    return [
        v.ref,
        str(len(v.files)),
        human_size(v.size),
        v.digest[:12],
        "copied" if v.copied else "referenced",
        v.url,
    ]


@data_app.command("get")
def data_get(
    ref: Annotated[str, typer.Argument(help="NAME, NAME@latest or NAME@VERSION.")],
    directory: Annotated[
        Path | None,
        typer.Option(
            "-d",
            "--dir",
            metavar="DIR",
            help="Copy the files into this folder (checked against their hashes; all or nothing).",
        ),
    ] = None,
    output: OutputOpt = Format.TABLE,
    json_: JsonOpt = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Show a dataset version and its files, or copy them to --dir (refused if a file changed)."""
    with _open(server, local) as catalog:
        version = catalog.dataset(ref)
        if directory is not None:  # all or nothing: a refused file leaves no partial copy
            catalog.fetch(version, directory)
    if directory is not None:
        emit_json({**version.to_json(), "dir": str(directory)}) if _json(output, json_) else typer.echo(
            str(directory)
        )
        return
    if _json(output, json_):
        emit_json(version.to_json(with_files=True))
        return
    typer.echo(
        f"{version.ref}  digest {version.digest}\nbytes {'copied to' if version.copied else 'referenced at'} "
        f"{version.url}\n{len(version.files)} file(s), {human_size(version.size)}"
    )
    typer.echo(
        _table(["path", "size", "sha256"], [[f.path, str(f.size), f.sha256[:16]] for f in version.files])
    )


@data_app.command("rm")
def data_rm(
    ref: Annotated[
        str, typer.Argument(help="NAME@VERSION (or NAME@latest) to forget one version; NAME: every version.")
    ],
    yes: YesOpt = False,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Forget a dataset's version, or every version of it. The bytes the catalog copied into its own
    folder go with the last version naming them; a source, or a --copy-to datastore's copy, stays.
    Asks first (on a terminal; elsewhere --yes), saying how many experiments read it."""
    from phalanx.spec.inputs import check_catalog_name, parse_dataset_ref
    from phalanx.store.catalog import no_dataset

    name, _ = parse_dataset_ref(ref)
    with _open(server, local) as catalog:
        if "@" in ref:
            named = [catalog.dataset(ref)]
            ref = named[0].ref  # NAME@latest: the version asked about is the one removed
        else:
            named = catalog.datasets(check_catalog_name(name, "dataset"))
            if not named:
                raise no_dataset(name, {v.name for v in catalog.datasets()})
        if not yes:
            _confirm_rm(ref, named, catalog.readers(name, [v.version for v in named]))
        gone = catalog.remove_dataset(ref)
    if output is Format.JSON:
        emit_json([v.to_json() for v in gone])
    else:
        typer.echo(f"removed {', '.join(v.ref for v in gone)}")


def _confirm_rm(ref: str, named: list[DatasetVersion], readers: int | None) -> None:
    from phalanx.domain import plural

    what = ref if "@" in ref else f"dataset {ref} and its {plural(len(named), 'version')}"
    them = "it" if len(named) == 1 else "them"
    if readers is None:
        read = f"the server cannot tell which experiments read {them}"
    elif readers:
        reruns = "its rerun" if readers == 1 else "their reruns"
        read = f"{plural(readers, 'experiment')} read {them}: {reruns} will no longer find {them}"
    else:
        read = f"no experiment read {them}"
    listed = "\n".join(f"  {v.ref} ({plural(len(v.files), 'file')}, {human_size(v.size)})" for v in named)
    confirm(f"Remove {what}? {read[0].upper()}{read[1:]}.\n{listed}\n", f"removing {what} ({read})")
