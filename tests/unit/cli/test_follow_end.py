"""What `phalanx run --follow` through a server prints when the experiment ends."""

from __future__ import annotations

import pytest

from phalanx.cli.remote import _ended


def test_the_failed_replicas_get_a_line_of_their_own_after_a_reason_ending_with_log_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exp = {
        "id": "ceb29ac3f78b",
        "status": "failed",
        "reason": "worker-0 exited with code 3; last lines of its log:\n  hi worker-0",
        "replicas": [
            {"name": "master", "state": "stopped"},
            {"name": "worker-0", "state": "failed", "exit_code": 3},
        ],
    }
    assert _ended(exp, None) == 1
    assert capsys.readouterr().err.splitlines() == [
        "phalanx: experiment ceb29ac3f78b failed: worker-0 exited with code 3; last lines of its log:",
        "  hi worker-0",
        "phalanx: failed replicas: worker-0 (exit code 3)",
    ]
