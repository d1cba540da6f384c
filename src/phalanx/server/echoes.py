"""What an error answer may say of what the caller sent: never a huge input echoed whole (a
5,000-character id, a Host header, a path with spaces), which would turn every error into an
amplifier and fill the logs that keep answers."""

from __future__ import annotations

import re

_WORD = re.compile(r"\S{200,}")  # a word this long is what the caller sent
MESSAGE_MAX = 1000  # characters of a message; a longer one is cut, saying how long it was


def cut_echoes(message: str) -> str:
    """``message`` with each word over 200 characters cut to 80, and cut to 1,000 in all."""
    cut = _WORD.sub(lambda m: f"{m.group()[:80]}…({len(m.group())} characters)", message)
    return cut if len(cut) <= MESSAGE_MAX else f"{cut[:MESSAGE_MAX]}…({len(cut)} characters)"
