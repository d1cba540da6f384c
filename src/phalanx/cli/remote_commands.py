"""The parts of `phalanx logs`, `stop` and `group stop` that differ against a server: following a
console by offsets through the API instead of ingesting a spool, and waiting for the server's
supervisor to finish a stop. Each prints what the local command prints."""

from __future__ import annotations

import sys
import time

import typer

from phalanx.cli.console_lines import print_console
from phalanx.following import DONE, POLL_SECONDS
from phalanx.remote_store import RemoteStore

LOG_PAGE = 1000  # the most lines the API answers a call (routes/logs.py)


def logs(store: RemoteStore, experiment_id: str, replica: str | None, follow: bool, as_json: bool) -> None:
    """Every replica's console (or ``replica``'s); with ``follow``, until the experiment ends.
    Ctrl-C ends the following only: the experiment runs on, on the server."""
    offsets: dict[str, int] = {}
    while True:
        done = store.get_experiment(experiment_id).status.done  # read before the lines: none is missed
        printed = print_console(store, experiment_id, replica, as_json, offsets, page=LOG_PAGE)
        sys.stdout.flush()
        if not follow or done:
            return
        if not printed:
            time.sleep(POLL_SECONDS)


def stop(store: RemoteStore, experiment_id: str, timeout: float) -> None:
    """Ask the server to stop the experiment; wait (up to ``timeout``) for its supervisor to end it."""
    answer = store.stop(experiment_id)
    exp_id = answer["id"]
    if not answer["stop_requested"]:
        typer.echo(f"experiment {exp_id} already {answer['status']}")
        return
    deadline = time.monotonic() + timeout
    status = str(answer["status"])
    while time.monotonic() < deadline:
        exp = store.get_experiment(exp_id)
        status = str(exp.status)
        if exp.status.done:
            break
        time.sleep(POLL_SECONDS)
    typer.echo(f"experiment {exp_id} {status}")


def stop_group(store: RemoteStore, group_id: str, timeout: float) -> None:
    """Stop a group on the server (no new trial starts, running trials are stopped); wait up to
    ``timeout`` for it to end (the server's own wait is shorter)."""
    doc = store.group_view(group_id)
    if doc["status"] in DONE:
        typer.echo(f"group {doc['id']} already {doc['status']}")
        return
    done = store.stop_group(doc["id"])
    deadline = time.monotonic() + timeout
    while done["status"] not in DONE and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        done = store.group_view(doc["id"])
    typer.echo(f"group {done['id']} {done['status']}")
