"""The group and trial records, now part of the domain vocabulary (``phalanx.domain``): kept under
this name so that code written against it still imports."""

from __future__ import annotations

from phalanx.domain import (
    GROUP_DONE,
    Group,
    GroupStatus,
    GroupUpdate,
    Trial,
    TrialState,
    TrialUpdate,
    best_trial,
)

__all__ = [
    "GROUP_DONE",
    "Group",
    "GroupStatus",
    "GroupUpdate",
    "Trial",
    "TrialState",
    "TrialUpdate",
    "best_trial",
]
