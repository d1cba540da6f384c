"""`phalanx get`'s attempts table keeps a failed attempt's whole reason: the replica's last lines
come under the attempt's line (they used to be cut after "last lines of its log:")."""

from __future__ import annotations

from phalanx.cli.details import run_details_text

# the reason the supervisor records for a replica that failed (supervisor/supervising.py)
REASON = (
    "worker-0 exited with code 1; last lines of its log:\n"
    "  Traceback (most recent call last):\n"
    '    File "train.py", line 9, in <module>\n'
    "  ValueError: the learning rate must be positive"
)


def attempt(number: int, kind: str, status: str, reason: str | None) -> dict[str, object]:
    return {"number": number, "kind": kind, "checkpoint_step": None, "status": status, "reason": reason}


def test_a_failed_attempt_keeps_the_replicas_last_lines() -> None:
    details = {
        "attempts": [
            attempt(0, "start", "failed", REASON),
            attempt(1, "restart", "failed", "requeued by slurm"),
            attempt(2, "restart", "succeeded", None),
        ]
    }
    assert run_details_text(details) == [
        "",
        "attempts:",
        "  0  start: failed (worker-0 exited with code 1; last lines of its log)",
        "       Traceback (most recent call last):",
        '         File "train.py", line 9, in <module>',
        "       ValueError: the learning rate must be positive",
        "  1  restart: failed (requeued by slurm)",
        "  2  restart: succeeded",
    ]
