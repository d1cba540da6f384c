"""What an experiment's name, project and tags may be: one line of printable text, not too long.

A name with a newline or of a few hundred characters was stored as given and broke every table,
log line and page that shows it. One rule, checked where each enters: the experiment file (with
its line and column), ``Task.init``, the ingest API (400) and the store. Standard library only: the
tracking SDK runs in replicas' own environments.
"""

from __future__ import annotations

import unicodedata

MAX_NAME = 128  # names and projects: a table column, a log prefix
MAX_TAG = 100
# control characters (newline, tab, NUL, escape...) and the line/paragraph separators
_BREAKING = ("Cc", "Zl", "Zp")


def label_problem(value: str, what: str, most: int = MAX_NAME) -> str | None:
    """Why ``value`` cannot be the ``what`` ("name", "project", "tag") of an experiment, or None."""
    if not value.strip():
        return f"the {what} is empty; give one, or leave the key out"
    bad = next((ch for ch in value if unicodedata.category(ch) in _BREAKING), None)
    if bad is not None:
        shown = value if len(value) <= 40 else value[:37] + "..."
        return (
            f"the {what} {shown!r} holds a control character ({unicodedata.name(bad, '') or repr(bad)}):"
            f" it is shown on one line in tables and logs; remove it"
        )
    if len(value) > most:
        return f"the {what} is {len(value)} characters long; at most {most} (it is shown in tables and logs)"
    return None


def check_label(value: str, what: str, most: int = MAX_NAME) -> str:
    """``value`` when it is a good ``what``; ValueError with the reason otherwise."""
    problem = label_problem(value, what, most)
    if problem is not None:
        raise ValueError(problem)
    return value
