"""What `phalanx tensorboard` and `phalanx notebook` share: a server's services (docs/services.md)
listed and stopped, each kind by its own command."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import typer

from phalanx.cli.listing import Format, _table, emit_json
from phalanx.errors import UsageError
from phalanx.logins import choose

if TYPE_CHECKING:
    from phalanx.remote_store import RemoteServices


def remote_services(server: str | None, command: str) -> RemoteServices:
    """The server's services; exit 2 when no server is in play (``command`` acts on one only)."""
    from phalanx.remote_store import RemoteServices  # why: `phalanx --help` stays fast (no urllib)

    client = choose(server, False, local_option=None)
    if client is None:
        kind = command.split()[0]
        raise UsageError(
            f"`phalanx {command}` lists or stops a server's services: `phalanx login URL` first, or give"
            f" --server URL. On this machine, `phalanx {kind} start` runs one in the foreground"
            " (Ctrl-C stops it)"
        )
    return RemoteServices(client)


def list_services(kind: str, output: Format, server: str | None) -> None:
    services = remote_services(server, f"{kind} ls")
    found = services.services(kind)
    if output is Format.JSON:
        emit_json([{**s, "url": services.url_of(s)} for s in found])
        return
    if not found:
        typer.echo(f"no {kind} runs (`phalanx {kind} start` starts one)")
        return
    rows = [_row(s, services.url_of(s)) for s in found]
    typer.echo(_table(["id", "project", "of", "started by", "idle", "url"], rows))


def stop_service(kind: str, service_id: str, server: str | None) -> None:
    remote_services(server, f"{kind} stop").stop(service_id)
    typer.echo(f"stopped {kind} {service_id}")


def said_started(kind: str, found: dict[str, Any], url: str, output: Format) -> None:
    """What `start` prints: the service's JSON with its URL, or where it answers."""
    if output is Format.JSON:
        emit_json({**found, "url": url})
        return
    said = "started" if found["started"] else "already running"
    target = found["target"]
    typer.echo(f"{kind} of {target['kind']} {target['id']} ({said}, service {found['id']}):")
    typer.echo(url)


def _row(service: dict[str, Any], url: str) -> list[str]:
    target = service["target"]
    started = time.strftime("%H:%M", time.localtime(service["started_at"]))
    return [
        service["id"],
        service["project"],
        f"{target['kind']} {target['id']}",
        f"{service['started_by']} {started}",
        f"{service['idle_seconds']:.0f}s",
        url,
    ]
