"""`phalanx run`'s view on a terminal: a live table of the replicas' states under their console lines.

rich is imported when the table is made, not with this module (`phalanx --help` stays fast).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from phalanx.terminal_text import terminal_safe

if TYPE_CHECKING:
    from collections.abc import Mapping

    from phalanx.domain import ReplicaState


class RichObserver:
    """On a terminal: a live table (replica, state, elapsed) under the streaming lines."""

    def __init__(self, names: list[str]) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console()
        self.names = names
        self.state: dict[str, str] = dict.fromkeys(names, "pending")
        self.since: dict[str, float] = dict.fromkeys(names, time.monotonic())
        self.ended: dict[str, float] = {}
        self.live = Live(self, console=self.console, refresh_per_second=4, transient=False)

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, show_header=True, header_style="bold")
        for col in ("replica", "state", "elapsed"):
            table.add_column(col)
        colours = {"running": "cyan", "succeeded": "green", "failed": "red", "stopped": "yellow"}
        now = time.monotonic()
        for name in self.names:
            state = self.state[name]
            end = self.ended.get(name, now)
            # Text, not markup: lines printed with markup=False re-render this table too
            table.add_row(name, Text(state, style=colours.get(state, "")), f"{end - self.since[name]:.1f}s")
        return table

    def __enter__(self) -> RichObserver:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def line(self, replica: str, text: str) -> None:
        # on a terminal only (`phalanx run` makes this observer for one): escape sequences shown, not obeyed
        line = f"[{replica}] {terminal_safe(text)}"
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def states(self, replicas: Mapping[str, ReplicaState], elapsed: float) -> None:
        now = time.monotonic()
        for name, state in replicas.items():
            if name in self.state and self.state[name] != str(state):
                self.state[name] = str(state)
                if state.done:
                    self.ended[name] = now

    def message(self, text: str) -> None:
        self.console.print(f"phalanx: {text}", markup=False, highlight=False)

    def flush(self) -> None:
        return None  # a terminal: Rich prints each line as it comes
