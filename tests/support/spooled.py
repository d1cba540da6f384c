"""What a spool file holds, as a test reads it back."""

from __future__ import annotations

from pathlib import Path

from phalanx import spool


def scalar_points(path: Path) -> list[tuple[str, str, int, float]]:
    """Every scalar point in the spool file at ``path``, in order: (title, series, step, value)."""
    records, _ = spool.read_records(path, 0, 1 << 30)
    points = []
    for record in records:
        if record["kind"] == "scalar":
            keys, index, steps, values, _ = spool.decode_points(record["data"])
            for i, (step, value) in enumerate(zip(steps, values, strict=True)):
                title, series = keys[index[i] if index is not None else 0]
                points.append((title, series, step, value))
    return points
