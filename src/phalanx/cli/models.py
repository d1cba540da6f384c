"""`phalanx models`: the models an experiment saved, and the model registry.

One command group, two kinds of first word:

- a verb (``register``, ``ls``, ``get``, ``alias``, ``download``, ``update``, ``rm``): the registry
  (phalanx.registry): named, versioned ONNX models with aliases that `phalanx serve` follows;
- anything else is an experiment id, as before the registry existed: `phalanx models ID` lists the
  models experiment ID saved (task.save_model) and `--download NAME` fetches one. It is the hidden
  subcommand ``experiment``; ``_ModelsGroup`` routes a non-verb first word to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from phalanx.cli.app import OutputOpt, YesOpt, app, confirm, fail
from phalanx.cli.listing import Format, emit_json
from phalanx.cli.record_tables import human_size
from phalanx.cli.target import DoorTyper, LocalOpt, ServerOpt
from phalanx.suggest import closest

if TYPE_CHECKING:
    from phalanx.registry.door import ModelRegistry
    from phalanx.registry.service import Registry
    from phalanx.store.base import ModelRecord

# what an experiment id (or a prefix of one) is made of: an id is never mistaken for a misspelt verb
_HEX = re.compile(r"[0-9a-f]+")


class _ModelsGroup(TyperGroup):
    """`phalanx models ID ...` (an experiment, not a verb) runs `phalanx models experiment ID ...`.

    A first word that cannot be an id (ids are hex) and is near a verb (`phalanx models regster`)
    is left to typer, which answers "No such command 'regster'. Did you mean 'register'?" as for
    every other command group; routed, it was "no experiment 'regster'" (or, with the verb's own
    options after it, "No such option")."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if (
            args
            and args[0] not in self.commands
            and args[0] not in ("--help", "-h")
            and not self._slip(args[0])
        ):
            args = ["experiment", *args]
        return super().parse_args(ctx, args)

    def _slip(self, word: str) -> bool:
        """Whether ``word`` is a misspelt verb rather than an experiment id."""
        verbs = [name for name, command in self.commands.items() if not command.hidden]
        return not _HEX.fullmatch(word.lower()) and closest(word, verbs) is not None


models_app = DoorTyper(
    cls=_ModelsGroup,
    help=(
        "The model registry (register, ls, get, alias, download, update, rm), or an experiment's saved "
        "models: `phalanx models ID [--download NAME]`."
    ),
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")

RefArg = Annotated[
    str, typer.Argument(metavar="NAME[@ALIAS|@N]", help="a registered model: latest, an alias or a version")
]


def _check(record: ModelRecord) -> str:
    """What the ONNX check said: passed/FAILED with the max abs diff; '-' for weights."""
    check = record.metadata.get("check")
    if not isinstance(check, dict):
        return "-"
    verdict = "passed" if check.get("passed") else "FAILED"
    return f"{verdict} (max diff {float(check.get('max_abs_diff', 0.0)):.2g})"


def model_json(record: ModelRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "model": record.metadata.get("model", record.name),
        "format": record.format,
        "path": record.path,
        "size": record.size,
        "replica": record.replica,
        "time": record.time,
        "metadata": dict(record.metadata),
    }


def _saved_models(server: str | None, local: bool) -> tuple[Any, Callable[[str, str, Path], None]]:
    """The store an experiment's saved models are read from (the server's after `phalanx login` or
    with --server, else this machine's) and how one of its files is fetched to a local path."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        from phalanx.estimators.remote import RemoteRun
        from phalanx.remote_store import RemoteStore

        def fetch_remote(experiment_id: str, path: str, target: Path) -> None:
            RemoteRun(client, experiment_id).download_file(path, target)

        return RemoteStore(client), fetch_remote
    from phalanx.config import Settings
    from phalanx.store import open_store

    store = open_store(Settings())

    def fetch_here(experiment_id: str, path: str, target: Path) -> None:
        if store.artifact_store is None:
            raise fail("this store has no artifact store to download from", 1)
        store.artifact_store.get_file(experiment_id, path, target)  # in parts, never whole

    return store, fetch_here


@models_app.command("experiment", hidden=True)
def experiment_models(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="experiment id or a unique prefix")],
    output: OutputOpt = Format.TABLE,
    download: Annotated[
        str | None,
        typer.Option(
            "--download",
            metavar="NAME",
            help="fetch a model: a file name (digits.onnx) or a model name (digits: all its files)",
        ),
    ] = None,
    directory: Annotated[
        Path, typer.Option("-d", "--dir", metavar="DIR", help="where --download writes")
    ] = Path("."),
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """List the models experiment ID saved (name, format, size, replica, ONNX check), or download one
    (`phalanx models ID` runs this)."""
    store, fetch = _saved_models(server, local)
    experiment = store.get_experiment(experiment_id)
    records = store.models(experiment.id)
    if download is not None:
        chosen = [r for r in records if r.name == download] or [
            r for r in records if r.metadata.get("model") == download
        ]
        if not chosen:
            names = ", ".join(r.name for r in records) or "none"
            raise fail(f"experiment {experiment.id} has no model {download!r} (models: {names})")
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for record in chosen:
            target = directory / Path(record.path).name
            fetch(experiment.id, record.path, target)
            written.append(target)
        if output == "json":
            emit_json([{"name": r.name, "file": str(p)} for r, p in zip(chosen, written, strict=True)])
        else:
            for p in written:
                typer.echo(str(p))
        return
    if output == "json":
        emit_json([model_json(r) for r in records])
        return
    if not records:
        typer.echo(
            f"experiment {experiment.id} has saved no models (task.save_model in the script saves one)"
        )
        return
    rows = [("NAME", "FORMAT", "SIZE", "REPLICA", "CHECK")]
    rows += [(r.name, r.format, human_size(r.size), r.replica, _check(r)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


# --- the registry -----------------------------------------------------------------------------


def open_registry(server: str | None, local: bool) -> ModelRegistry:
    """The registry a command works on: the server's (after `phalanx login`, or --server) or this
    machine's (--local, or no login); which one is said on stderr once a server is in play."""
    registry, _ = registry_door(server, local)
    return registry


def registry_door(server: str | None, local: bool) -> tuple[ModelRegistry, Registry | None]:
    """``open_registry``'s registry, and this machine's ``Registry`` again when that is the one
    (what only this machine's registry answers: `phalanx serve`'s service experiment); None on a
    server."""
    from phalanx.logins import choose

    client = choose(server, local)
    if client is not None:
        from phalanx.registry.remote import RemoteRegistry

        return RemoteRegistry(client), None
    from phalanx.config import Settings
    from phalanx.registry.checker import check_in_process
    from phalanx.registry.service import Registry
    from phalanx.store import open_store

    # no server: the user's own file, checked in the user's own process (phalanx.registry.checker)
    here = Registry(open_store(Settings()), check_in_process)
    return here, here


def _tags(values: list[str] | None) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise fail(f"--tag {item!r}: give KEY=VALUE, e.g. --tag team=vision")
        found[key.strip()] = value
    return found


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _parity(p: dict[str, Any]) -> str:
    """A version's parity figure (its lineage's ``parity``): passed/FAILED with the max diff."""
    if not p:
        return "-"
    return f"{'passed' if p.get('passed') else 'FAILED'} (max diff {float(p.get('max_abs_diff', 0)):.2g})"


def _shapes(items: list[dict[str, Any]]) -> str:
    def dim(d: Any) -> str:
        return "?" if d is None else str(d)

    return ", ".join(f"{i['name']}: {i['dtype']}[{', '.join(dim(d) for d in i['shape'])}]" for i in items)


@models_app.command("register")
def register(
    source: Annotated[
        str,
        typer.Argument(
            metavar="EXPERIMENT[/MODEL]",
            help="an experiment id (or prefix), and the model's name when it saved several",
        ),
    ],
    name: Annotated[str, typer.Option("--name", "-n", metavar="NAME", help="the registered model's name")],
    description: Annotated[str | None, typer.Option("--description", help="what this version is")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", metavar="KEY=VALUE", help="repeatable")] = None,
    alias: Annotated[
        str | None, typer.Option("--alias", metavar="ALIAS", help="also point NAME@ALIAS at the new version")
    ] = None,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Register an experiment's ONNX model as the next version of NAME, after re-running its ONNX
    check on the stored file (a file that fails it is refused, with its parity figure)."""
    tags = _tags(tag)
    if alias is not None:
        from phalanx.store.registry_records import check_alias

        check_alias(alias)
    from phalanx.registry.door import register_version

    created = register_version(open_registry(server, local), source, name, description, tags, alias)
    if output == "json":
        emit_json(created)
        return
    figure = _parity(created["lineage"].get("parity") or {})
    typer.echo(
        f"registered {created['name']} version {created['version']} from experiment "
        f"{created['experiment_id']} ({created['source']}; parity {figure})"
        + (f"; {created['name']}@{alias} -> {created['version']}" if alias else "")
    )


@models_app.command("ls")
def ls(
    name: Annotated[str | None, typer.Argument(metavar="[NAME]", help="list this model's versions")] = None,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """List the registered models, or the versions of NAME."""
    from phalanx.registry.service import model_json, version_json

    registry = open_registry(server, local)
    if name is None:
        models = registry.models()
        if output == "json":
            emit_json([model_json(m) for m in models])
            return
        if not models:
            typer.echo("no registered models (`phalanx models register EXPERIMENT --name NAME` adds one)")
            return
        rows: list[tuple[str, ...]] = [("NAME", "LATEST", "ALIASES", "DESCRIPTION")]
        for m in models:
            aliases = ", ".join(f"@{a}={v}" for a, v in m.aliases.items()) or "-"
            rows.append((m.name, str(m.latest_version or "-"), aliases, (m.description or "")[:60]))
        _table(rows)
        return
    versions = registry.versions(name)
    if output == "json":
        emit_json([version_json(v) for v in versions])
        return
    table: list[tuple[str, ...]] = [("VERSION", "ALIASES", "EXPERIMENT", "SOURCE", "PARITY", "DESCRIPTION")]
    for v in versions:
        aliases = ", ".join(f"@{a}" for a in v.aliases) or "-"
        table.append(
            (
                str(v.version),
                aliases,
                v.experiment_id,
                v.source,
                _parity(v.parity),
                (v.description or "")[:50],
            )
        )
    _table(table)


@models_app.command("get")
def get(
    ref: RefArg, output: OutputOpt = Format.TABLE, server: ServerOpt = None, local: LocalOpt = False
) -> None:
    """Show one version: lineage (experiment, params, final metrics, snapshot), signature, aliases."""
    from phalanx.registry.service import version_json

    v = open_registry(server, local).resolve(ref)
    if output == "json":
        emit_json(version_json(v))
        return
    lineage = v.lineage
    exp = lineage.get("experiment", {})
    lines = [
        f"{v.name} version {v.version}"
        + (f"  aliases: {', '.join('@' + a for a in v.aliases)}" if v.aliases else ""),
        f"experiment:  {v.experiment_id} ({exp.get('name', '?')}, project {exp.get('project', '?')})",
        f"source:      {v.source} (sha256 {v.sha256[:16]}…, {human_size(v.size)})",
        f"parity:      {_parity(v.parity)}",
        f"inputs:      {_shapes(v.signature.get('inputs', []))}",
        f"outputs:     {_shapes(v.signature.get('outputs', []))}",
    ]
    if v.description:
        lines.append(f"description: {v.description}")
    if v.tags:
        lines.append("tags:        " + ", ".join(f"{k}={val}" for k, val in sorted(v.tags.items())))
    snapshot = lineage.get("snapshot") or {}
    if snapshot:
        lines.append("snapshot:    " + ", ".join(f"{k} {val}" for k, val in snapshot.items()))
    data = lineage.get("inputs") or []
    if data:
        from phalanx.data.lineage import describe

        lines.append("data:")
        lines += [f"  {r.get('name')}: {describe(r)}" for r in data]
    for title, values in (("params", lineage.get("params") or {}), ("metrics", lineage.get("metrics") or {})):
        if values:
            lines.append(f"{title}:")
            lines += [f"  {k} = {val}" for k, val in sorted(values.items())]
    for line in lines:
        typer.echo(line)


@models_app.command("alias")
def alias(
    target: Annotated[str, typer.Argument(metavar="NAME@ALIAS", help="the alias to set or move")],
    version: Annotated[
        int | None, typer.Argument(metavar="[VERSION]", help="the version it names from now on")
    ] = None,
    delete: Annotated[bool, typer.Option("--delete", help="remove the alias")] = False,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Point NAME@ALIAS at VERSION (moved in one transaction: a server following it never sees none)."""
    from phalanx.errors import UsageError
    from phalanx.store.registry_records import parse_ref

    ref = parse_ref(target)  # (UsageErrors below: their hints are given this command's door)
    if ref.alias is None:
        raise UsageError(f"{target!r}: give NAME@ALIAS, e.g. `phalanx models alias {ref.name}@prod 3`")
    if delete and version is not None:
        raise UsageError("--delete takes no VERSION")
    if not delete and version is None:
        raise UsageError(f"give the version {ref} names, e.g. `phalanx models alias {ref} 3`")
    registry = open_registry(server, local)
    if delete:
        registry.delete_alias(ref.name, ref.alias)
        typer.echo(f"removed {ref}")
        return
    assert version is not None  # checked above
    before = registry.set_alias(ref.name, ref.alias, version)
    moved = "" if before is None or before == version else f" (was {before})"
    typer.echo(f"{ref} -> version {version}{moved}")


@models_app.command("rm")
def rm(
    ref: Annotated[str, typer.Argument(metavar="NAME[@N]", help="the model (every version), or one version")],
    yes: YesOpt = False,
    output: OutputOpt = Format.TABLE,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Remove a registered model (NAME: every version and alias) or one version (NAME@N: the aliases
    naming it go too). Its registry copy of the file goes; the experiment's own file stays."""
    from phalanx.domain import plural
    from phalanx.errors import NotFound, UsageError
    from phalanx.registry.service import version_json
    from phalanx.store.registry_records import ModelRef, parse_ref
    from phalanx.suggest import did_you_mean

    parsed = parse_ref(ref)
    if parsed.alias is not None:
        raise UsageError(
            f"{ref!r}: rm takes NAME or NAME@VERSION, not an alias (`phalanx models get {ref}` names "
            f"its version; `phalanx models alias {ref} --delete` removes only the alias)"
        )
    registry = open_registry(server, local)
    try:
        if parsed.version is None:
            found = registry.versions(parsed.name)
        else:
            found = [registry.resolve(ModelRef(parsed.name, version=parsed.version))]
    except NotFound as exc:
        if parsed.version is not None or parsed.name in {m.name for m in registry.models()}:
            raise
        names = (m.name for m in registry.models())
        raise NotFound(f"{exc}{did_you_mean(parsed.name, names)}") from None
    if not yes:
        listed = "\n".join(
            f"  {v.name}@{v.version}"
            + "".join(f" @{a}" for a in v.aliases)
            + f" (experiment {v.experiment_id})"
            for v in found
        )
        what = (
            f"model {parsed.name} and its {plural(len(found), 'version')}" if parsed.version is None else ref
        )
        confirm(f"Remove {what}?\n{listed}\n", f"removing {ref}")
    gone = registry.remove(parsed.name, parsed.version)
    if output == "json":
        emit_json([version_json(v) for v in gone])
        return
    aliases = [f"{v.name}@{a}" for v in gone for a in v.aliases]
    removed = ", ".join(f"{v.name}@{v.version}" for v in gone) or "no versions"
    head = f"removed model {parsed.name} ({removed})" if parsed.version is None else f"removed {removed}"
    typer.echo(head + (f"; aliases removed: {', '.join(aliases)}" if aliases else ""))


@models_app.command("download")
def download(
    ref: RefArg,
    directory: Annotated[Path, typer.Option("-d", "--dir", metavar="DIR", help="where to write")] = Path("."),
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Write a version's ONNX file as DIR/NAME-vN.onnx."""
    from phalanx.registry.door import download_version
    from phalanx.store.registry_records import parse_ref

    parse_ref(ref)
    typer.echo(str(download_version(open_registry(server, local), ref, directory)))


@models_app.command("update")
def update(
    ref: Annotated[str, typer.Argument(metavar="NAME[@N]", help="the model, or one version of it")],
    description: Annotated[str | None, typer.Option("--description", help="new description")] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", metavar="KEY=VALUE", help="set a tag (KEY= removes it)")
    ] = None,
    server: ServerOpt = None,
    local: LocalOpt = False,
) -> None:
    """Set the description or tags of a registered model (NAME) or of one version (NAME@N)."""
    from phalanx.store.registry_records import parse_ref

    parsed = parse_ref(ref)
    if parsed.alias is not None:
        raise fail(f"{ref!r}: update takes NAME or NAME@VERSION, not an alias")
    if description is None and not tag:
        raise fail("nothing to update: give --description TEXT and/or --tag KEY=VALUE")
    tags: dict[str, str | None] = {k: (v if v != "" else None) for k, v in _tags(tag).items()}
    open_registry(server, local).update(parsed.name, parsed.version, description=description, tags=tags)
    typer.echo(f"updated {ref}")
