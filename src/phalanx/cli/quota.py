"""`phalanx quota set|ls|rm`: what a project's experiments may hold at once on a target, and how many
may wait (issue 25: quotas and fair share). Quotas live in this home's store, so on the server's
machine they apply to the server's submissions and to local `phalanx run`s alike; after `phalanx
login` (or with ``--server URL``) the commands set and read the server's quotas through its API
instead (``--local``: this machine's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phalanx.cli.app import OutputOpt, app
from phalanx.cli.listing import emit_json
from phalanx.cli.target import DoorTyper, LocalOpt
from phalanx.cli.tracking import Format

if TYPE_CHECKING:
    from phalanx.cli.remote import Client
    from phalanx.store.base import LocalStore

quota_app = DoorTyper(
    help="Per-project quotas: cores, GPUs and memory held at once, and experiments waiting.",
    no_args_is_help=True,
)
app.add_typer(quota_app, name="quota")

TargetOption = Annotated[str, typer.Option("--target", help="the compute target; 'local' is this machine")]
ServerOption = Annotated[
    str | None,
    typer.Option("--server", metavar="URL", help="a Phalanx server's quotas (default: `phalanx login`'s)"),
]
TokenOption = Annotated[
    Path | None,
    typer.Option("--token-file", metavar="FILE", help="With --server: the token (else PHALANX_TOKEN)."),
]


def _client(server: str | None, local: bool, token_file: Path | None) -> Client | None:
    """The server's client (after `phalanx login`, or with --server), said on stderr; None: this
    machine's quotas."""
    from phalanx.logins import choose

    return choose(server, local, token_file)


def _checked(project: str) -> str:
    """The project named, or UsageError for none ('' on either door)."""
    from phalanx.errors import UsageError

    if not project.strip():
        raise UsageError("a project name is required")
    return project


def _quoted(project: str) -> str:
    from urllib.parse import quote

    return quote(_checked(project), safe="")


def _store() -> LocalStore:
    from phalanx.config import Settings
    from phalanx.store import open_store

    return open_store(Settings())


def _memory(value: str | None) -> float | None:
    from phalanx.errors import UsageError
    from phalanx.spec.quantities import parse_memory

    if value is None:
        return None
    try:
        return parse_memory(value)
    except ValueError as exc:
        raise UsageError(f"--memory: {exc}") from None


def _size(mib: float | None) -> str:
    if mib is None:
        return "-"
    return f"{mib / 1024:g}Gi" if mib >= 1024 and mib % 1024 == 0 else f"{mib:g}Mi"


def _n(value: object) -> str:
    return "-" if value is None else str(value)


@quota_app.command("set")
def set_quota(
    project: Annotated[str, typer.Argument(help="the project (the `project:` of its experiment files)")],
    target: TargetOption = "local",
    cores: Annotated[int | None, typer.Option("--cores", min=0, help="cores held at once")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=0, help="GPUs held at once")] = None,
    memory: Annotated[
        str | None, typer.Option("--memory", help="memory held at once: 8Gi, 512Mi, 8G (10^9 bytes) or MiB")
    ] = None,
    max_waiting: Annotated[
        int | None, typer.Option("--max-waiting", min=0, help="experiments that may wait in the queue")
    ] = None,
    server: ServerOption = None,
    local: LocalOpt = False,
    token_file: TokenOption = None,
) -> None:
    """Set the project's quota on a target; options not given keep their current value (none: no
    limit). Waiting experiments are judged by the new quota within seconds."""
    from dataclasses import replace

    from phalanx.share import Limit, Quota
    from phalanx.store import quotas

    given: dict[str, Any] = {
        "cores": cores,
        "gpus": gpus,
        "memory_mib": _memory(memory),
        "max_waiting": max_waiting,
    }
    project = _checked(project)
    client = _client(server, local, token_file)
    if client is not None:
        path = f"/projects/{_quoted(project)}/quota"
        doc = client.get(path, target=target)
        body = {k: doc[k] for k in ("cores", "gpus", "max_waiting")}
        body["memory"] = doc["memory_mib"]
        body.update({("memory" if k == "memory_mib" else k): v for k, v in given.items() if v is not None})
        body["target"] = target
        _, doc = client.request("PUT", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        limit = Limit(doc["cores"], doc["gpus"], doc["memory_mib"], doc["max_waiting"])
        typer.echo(f"project {project} on {target} at {client.url}: {_describe(limit)}")
        return
    store = _store()
    current = quotas.get(store, project, target)
    limit = Limit() if current is None else current.limit
    limit = replace(limit, **{k: v for k, v in given.items() if v is not None})
    quota = quotas.put(store, Quota(project, target, limit))
    typer.echo(f"project {project} on {target}: {_describe(quota.limit)}")


def _describe(limit: object) -> str:
    from phalanx.share import Limit

    assert isinstance(limit, Limit)
    parts = []
    if limit.cores is not None:
        parts.append(f"{limit.cores} core{'s' * (limit.cores != 1)}")
    if limit.gpus is not None:
        parts.append(f"{limit.gpus} GPU{'s' * (limit.gpus != 1)}")
    if limit.memory_mib is not None:
        parts.append(f"{_size(limit.memory_mib)} of memory")
    held = " and ".join(parts)
    text = f"at most {held} at once" if held else "no limit on what it holds"
    if limit.max_waiting is not None:
        text += f"; at most {limit.max_waiting} waiting"
    return text


@quota_app.command("ls")
def list_quotas(
    target: Annotated[str | None, typer.Option("--target", help="only this target")] = None,
    output: OutputOpt = Format.TABLE,
    server: ServerOption = None,
    local: LocalOpt = False,
    token_file: TokenOption = None,
) -> None:
    """List the quotas, with what each project holds now and its recent usage on this machine."""
    from phalanx.cli.tracking import _table
    from phalanx.config import Settings
    from phalanx.queue import overview
    from phalanx.share import Limit, Quota
    from phalanx.store import quotas

    client = _client(server, local, token_file)
    if client is not None:
        found = [
            Quota(q["project"], q["target"], Limit(q["cores"], q["gpus"], q["memory_mib"], q["max_waiting"]))
            for q in client.get("/quotas", target=target)
        ]
        here = {p["project"]: p for p in client.get("/queue").get("projects", [])}
    else:
        store = _store()
        found = quotas.list_quotas(store, target)
        here = {p["project"]: p for p in overview(Settings(), store)["projects"]}
    docs: list[dict[str, Any]] = []
    for q in found:
        doc: dict[str, Any] = dict(q.to_json())
        now = here.get(q.project) if q.target == "local" else None
        doc["holds"] = None if now is None else now["holds"]
        doc["waiting"] = None if now is None else now["waiting"]
        doc["recent_core_seconds"] = None if now is None else now["recent_core_seconds"]
        docs.append(doc)
    if output is Format.JSON:
        emit_json(docs)
        return
    if not docs:
        typer.echo(
            "no quotas: every project may use the whole machine (`phalanx quota set PROJECT --cores N`)"
        )
        return
    rows = [
        [
            d["project"],
            d["target"],
            _n(d["cores"]),
            _n(d["gpus"]),
            _size(d["memory_mib"]),
            _n(d["max_waiting"]),
            "-" if d["holds"] is None else str(d["holds"]["cpus"]),
            _n(d["waiting"]),
            "-" if d["recent_core_seconds"] is None else f"{d['recent_core_seconds'] / 3600:.2f}",
        ]
        for d in docs
    ]
    headers = [
        "project",
        "target",
        "cores",
        "gpus",
        "memory",
        "max waiting",
        "cores held",
        "waiting",
        "core-h",
    ]
    typer.echo(_table(headers, rows))


@quota_app.command("rm")
def remove_quota(
    project: Annotated[str, typer.Argument(help="the project")],
    target: TargetOption = "local",
    server: ServerOption = None,
    local: LocalOpt = False,
    token_file: TokenOption = None,
) -> None:
    """Remove the project's quota on a target (it may then use the whole machine)."""
    from urllib.parse import quote

    from phalanx.store import quotas

    project = _checked(project)
    client = _client(server, local, token_file)
    if client is not None:  # a 404 is the server's NotFound, in the words this machine's store says
        client.request("DELETE", f"/projects/{_quoted(project)}/quota?target={quote(target)}")
        typer.echo(f"project {project}: no quota on {target} at {client.url} any more")
        return
    quotas.remove(_store(), project, target)  # NotFound: none there, or a project the server lacks
    typer.echo(f"project {project}: no quota on {target} any more")
