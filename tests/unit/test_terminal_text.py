"""A job's console text reaches a reader's terminal as `less -R` shows it (``phalanx.terminal_text``):
printable text, tab, newline, carriage return and SGR colours pass; every other control character and
escape sequence is written visibly as ``\\xNN``. A file or a pipe gets the exact text. The writers
that echo a replica's lines (the plain observer, the live table, a server follower) use it."""

from __future__ import annotations

import io

import pytest

from phalanx.following import ExperimentFollower
from phalanx.runner.observers import PlainObserver
from phalanx.terminal_text import for_stream, terminal_safe
from tests.unit.test_following import FakeServerClient

HOSTILE = "\x1b]0;PWNED-TITLE\x07\x1b[2J\x1b[31mRED\x1b[0m"
SHOWN = "\\x1b]0;PWNED-TITLE\\x07\\x1b[2J\x1b[31mRED\x1b[0m"


class Terminal(io.StringIO):
    """What a reader's terminal gets, as a stream that says it is one."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("epoch 1: loss 0.25 ✓", "epoch 1: loss 0.25 ✓"),  # printable, non-ASCII included
        ("\x1b[1;31merror\x1b[m \x1b[38;5;208mx\x1b[38:2::1:2:3my", None),  # SGR colours kept
        (" 10%|█         | 1/10\r 20%|██        | 2/10", None),  # tqdm's \r kept
        ("a\tb\n", None),
        (HOSTILE, SHOWN),  # OSC (title), BEL, CSI clear
        ("\x1b]52;c;cHduZWQ=\x1b\\", "\\x1b]52;c;cHduZWQ=\\x1b\\"),  # OSC 52 clipboard, ended by ST
        ("\x1b[H\x1b[3A\x1b[?1049h\x1bP1$r\x1b\\", "\\x1b[H\\x1b[3A\\x1b[?1049h\\x1bP1$r\\x1b\\"),
        ("\x9b2J\x9d0;t\x9c \x85", "\\x9b2J\\x9d0;t\\x9c \\x85"),  # C1 controls (CSI, OSC, ST, NEL)
        ("bell\x07 back\x08 del\x7f nul\x00 ff\x0c", "bell\\x07 back\\x08 del\\x7f nul\\x00 ff\\x0c"),
        ("unended \x1b]0;title", "unended \\x1b]0;title"),  # a sequence the line cuts off
        # bidirectional overrides and isolates: `evil\u202egpj.exe` would show as "evilexe.jpg"
        ("evil\u202egpj.exe \u2066x\u2069 \u202a", "evil\\u202egpj.exe \\u2066x\\u2069 \\u202a"),
        ("\u200f\u05d0 \u2067", "\u200f\u05d0 \\u2067"),  # a right-to-left mark and Hebrew stay as text
        ("unended \x1b[31", "unended \\x1b[31"),  # an SGR without its m is no SGR
        ("a lone escape \x1b", "a lone escape \\x1b"),
    ],
)
def test_only_text_and_colours_reach_a_terminal(text: str, shown: str | None) -> None:
    assert terminal_safe(text) == (text if shown is None else shown)


def test_a_terminal_gets_the_safe_text_and_a_file_or_pipe_the_exact_text() -> None:
    assert for_stream(Terminal())(HOSTILE) == SHOWN
    assert for_stream(io.StringIO())(HOSTILE) == HOSTILE
    assert for_stream(object())(HOSTILE) == HOSTILE  # a writer that cannot say: no terminal


def test_the_plain_observer_escapes_on_a_terminal_only() -> None:
    terminal, piped = Terminal(), io.StringIO()
    PlainObserver(terminal).line("worker-1", HOSTILE)
    PlainObserver(piped).line("worker-1", HOSTILE)
    assert terminal.getvalue() == f"[worker-1] {SHOWN}\n"
    assert piped.getvalue() == f"[worker-1] {HOSTILE}\n"


def test_a_server_follower_escapes_on_a_terminal_only() -> None:
    for out, expected in ((Terminal(), SHOWN), (io.StringIO(), HOSTILE)):
        client = FakeServerClient()
        client.lines, client.build = [HOSTILE], []
        ExperimentFollower(client, "e1", None).look(out)
        assert out.getvalue() == f"[master] {expected}\n"


def test_the_live_table_shows_a_replicas_escape_sequences_instead_of_obeying_them() -> None:
    from rich.console import Console

    from phalanx.cli.live_table import RichObserver

    observer = RichObserver(["master"])
    observer.console = Console(file=Terminal(), force_terminal=True, width=200)
    observer.line("master", HOSTILE)
    written = observer.console.file.getvalue()
    assert "\\x1b]0;PWNED-TITLE\\x07\\x1b[2J" in written and "\x1b]" not in written and "\x07" not in written
