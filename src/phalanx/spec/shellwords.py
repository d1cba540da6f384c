"""Where a placeholder sits in a shell command: bare, single- or double-quoted.

Used by the spec's checks (`phalanx check`'s note on an empty param) and by the plan's rendering
alike, so it lives below both.
"""

from __future__ import annotations


def stands_alone(command: str, start: int, end: int) -> bool:
    """Whether the placeholder at ``command[start:end]`` is a whole shell word by itself (bare, with
    blanks or the command's ends around it). Filled with an empty value, such a placeholder renders
    as nothing, not as ``''``: Polyaxon 0.x filled files by plain text substitution, so files written
    for it use ``{{ extra }}`` with ``extra: ""`` for an optional flag, and an empty argument made
    their scripts fail (argparse: "unrecognized arguments"). A user who means an empty argument
    writes it quoted: ``"{{ extra }}"``."""
    before = command[start - 1] if start > 0 else " "
    after = command[end] if end < len(command) else " "
    return before in " \t\n;&|(" and after in " \t\n;&|)" and quote_state(command, start) == ""


def quote_state(command: str, end: int) -> str:
    """The shell's quoting at ``command[end]``: "" (bare), "'" or '"'."""
    state = ""
    i = 0
    while i < end:
        ch = command[i]
        if state == "'":
            if ch == "'":
                state = ""
        elif ch == "\\":
            i += 1  # an escaped character (bare or inside "...") changes nothing
        elif state == '"':
            if ch == '"':
                state = ""
        elif ch in "'\"":
            state = ch
        i += 1
    return state
