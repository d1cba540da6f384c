"""A job's console text made safe for the terminal of whoever reads it, as `less -R` shows it.

What a replica prints reaches the terminal of the teammate or admin who runs `phalanx logs`, follows
a run or watches its echo. Escape sequences in it would act on that terminal: set its title, clear
the screen, write the clipboard (OSC 52), or make some terminals type input back (title reports).
``terminal_safe`` passes printable text, tab, newline, carriage return (progress bars redraw with
it) and SGR colour sequences (``ESC [ 1;31 m``); every other control character (C0 but those three,
DEL, C1) is written visibly as ``\\xNN``, and a bidirectional override or isolate as ``\\uNNNN``
(it would show the rest of the line reordered), never dropped, so the reader still sees that the
program printed something. Escaping the introducer (ESC, CSI ``\\x9b``, OSC ``\\x9d``, ...) disarms the
whole sequence: what follows it is plain text to a terminal, ended or not.

Only a terminal gets the escaped text (``for_stream``): a file or a pipe (`phalanx logs ID >
out.txt`, `| grep`) gets the exact text the replica printed, as `cat` gives it; `-o json` is exact
regardless (JSON escapes control characters itself). Whoever pipes into a pager or `cat` chose how
that shows it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import IO, Any

# Any one control character but \t \n \r, or a bidirectional override or isolate (U+202A-U+202E,
# U+2066-U+2069: they reorder what follows on the line, so a name or a log line could show text that
# is not what it holds, as "Trojan Source" does in code): escaped.
_CONTROLS = "\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f\\u202a-\\u202e\\u2066-\\u2069"
# An SGR sequence (kept whole), or one of those (escaped).
_SGR_OR_CONTROL = re.compile(rf"(\x1b\[[0-9;:]*m)|[{_CONTROLS}]")
_CONTROL = re.compile(rf"[{_CONTROLS}]")


def _shown(match: re.Match[str]) -> str:
    if match.group(1):
        return match.group(1)
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every control character and escape sequence but SGR colours written as
    ``\\xNN`` (``ESC]0;title BEL`` becomes ``\\x1b]0;title\\x07``); \\t, \\n and \\r kept."""
    if _CONTROL.search(text) is None:  # the common line: nothing to look at twice
        return text
    return _SGR_OR_CONTROL.sub(_shown, text)


def _exact(text: str) -> str:
    return text


def is_terminal(stream: IO[Any] | Any) -> bool:
    """Whether ``stream`` is a terminal (False for a closed or detached one, or no stream at all)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def for_stream(stream: IO[Any] | Any) -> Callable[[str], str]:
    """How a job's text is written to ``stream``: ``terminal_safe`` on a terminal, exact otherwise."""
    return terminal_safe if is_terminal(stream) else _exact


def write_shown(text: str, stream: IO[str]) -> None:
    """Write a job's ``text`` and a newline to ``stream`` as ``for_stream`` says: shown escaped on a
    terminal, exact to a file or a pipe (an ``echo`` that strips colours off a pipe would not)."""
    stream.write(for_stream(stream)(text) + "\n")
