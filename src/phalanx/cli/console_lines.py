"""How `phalanx logs` prints an experiment's console, whichever door reads it (this machine's store,
its lean reader, a server): without typer or the server's client, so that the lean `phalanx logs`
(cli/lean.py) imports neither."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from phalanx.domain import LogLine, console_sources
from phalanx.terminal_text import for_stream

if TYPE_CHECKING:
    from phalanx.views import Consoles


def print_lines(lines: list[LogLine], replica: str | None, as_json: bool) -> None:
    """Log lines as `phalanx logs` prints them: `[replica] text`, the text alone with --replica, or
    one JSON document a line. On a terminal a line's control characters and escape sequences but
    its colours are shown escaped (``phalanx.terminal_text``); a file or pipe gets the exact text."""
    shown = for_stream(sys.stdout)
    for line in lines:
        if as_json:
            doc = {"replica": line.replica, "offset": line.offset, "time": line.time, "text": line.text}
            sys.stdout.write(json.dumps(doc) + "\n")
        elif replica:
            sys.stdout.write(shown(line.text) + "\n")
        else:
            sys.stdout.write(f"[{line.replica}] {shown(line.text)}\n")


def print_console(
    door: Consoles,
    experiment_id: str,
    replica: str | None,
    as_json: bool,
    offsets: dict[str, int],
    page: int | None = None,
) -> int:
    """Print the lines of ``replica``'s console (or of every console: the build's, then each
    replica's) after ``offsets`` (per console, moved past what is printed); how many were printed.
    ``page``: a door that answers at most that many lines a call (a server) is asked until it has
    none left."""
    names = [replica] if replica else console_sources([r.name for r in door.list_replicas(experiment_id)])
    printed = 0
    for name in names:
        while True:
            start = offsets.get(name, 0)
            if page is None:
                lines = door.logs(experiment_id, replica=name, offset=start)
            else:
                lines = door.logs(experiment_id, replica=name, offset=start, limit=page)
            print_lines(lines, replica, as_json)
            if lines:
                offsets[name] = lines[-1].offset + 1
                printed += len(lines)
            if page is None or len(lines) < page:
                break
    return printed
