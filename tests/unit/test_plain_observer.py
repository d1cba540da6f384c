"""The plain observer (`phalanx run` to a pipe or a file, a detached supervisor's log): a chatty
replica's lines are written together, not one system call each, and still reach the reader at each
poll of the supervisor and before any note of the supervisor's, in order."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from phalanx.domain import ReplicaState
from phalanx.runner.observers import PlainObserver
from phalanx.supervisor.console import Console
from phalanx.supervisor.outcome import Shielded
from tests.unit.supervisor.fakes import FakeObserver


class Reader(io.StringIO):
    """A pipe's reader: sees what was flushed to it, and when."""

    def __init__(self, name: str, said: list[tuple[str, str]]) -> None:
        super().__init__()
        self.name, self.said, self.flushes = name, said, 0

    def flush(self) -> None:
        self.flushes += 1
        if self.getvalue():
            self.said.append((self.name, self.getvalue()))
            self.seek(0)
            self.truncate()


def test_lines_are_written_together_and_reach_the_reader_before_each_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said: list[tuple[str, str]] = []
    out, err = Reader("out", said), Reader("err", said)
    monkeypatch.setattr(sys, "stderr", err)
    observer = PlainObserver(out)
    for i in range(1000):
        observer.line("master", f"step {i}")
    assert out.flushes == 0  # 1,000 lines, no system call each
    observer.states({"master": ReplicaState.SUCCEEDED}, 1.5)
    observer.line("master", "after")
    observer.message("experiment e1 succeeded")
    observer.line("master", "late")
    observer.flush()  # the supervisor's poll, or its end
    assert said == [
        ("out", "".join(f"[master] step {i}\n" for i in range(1000))),
        ("err", "phalanx: master succeeded (1.5 s)\n"),
        ("out", "[master] after\n"),
        ("err", "phalanx: experiment e1 succeeded\n"),
        ("out", "[master] late\n"),
    ]


def test_a_reader_gone_stops_the_echo_at_a_flush_without_a_word() -> None:
    class Gone(io.StringIO):
        def flush(self) -> None:
            raise BrokenPipeError

    observer = PlainObserver(Gone())
    observer.line("master", "one")
    observer.flush()  # `phalanx run | head -1` after head exited: the experiment goes on
    observer.line("master", "two")
    observer.flush()


def test_every_poll_of_the_supervisor_flushes_its_observer(tmp_path: Path) -> None:
    class Counting(FakeObserver):
        flushes = 0

        def flush(self) -> None:
            self.flushes += 1

    inner = Counting()
    console = Console(None, Shielded(inner), {})  # type: ignore[arg-type]  # no spool: no replica
    console.flush()
    console.flush()
    assert inner.flushes == 2


def test_an_observer_without_flush_keeps_its_echo() -> None:
    """A Runner.run caller's observer written to the protocol before flush() (line, states,
    message): a poll's flush was its first failure, and every later line went unshown."""

    class Older:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def line(self, replica: str, text: str) -> None:
            self.lines.append(text)

        def states(self, replicas: object, elapsed: float) -> None:
            return None

        def message(self, text: str) -> None:
            return None

    inner = Older()
    shielded = Shielded(inner)  # type: ignore[arg-type]  # the older protocol, on purpose
    shielded.line("master", "one")
    shielded.flush()
    shielded.line("master", "two")
    assert inner.lines == ["one", "two"] and not shielded.broken
