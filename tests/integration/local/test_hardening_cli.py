"""Issue #10 through the CLI: mistakes that used to pass silently, and a terminal that goes away."""

from __future__ import annotations

import subprocess

from .conftest import PHALANX, Phalanx

COUNTER = """
import time
for i in range(60):
    print(f"line {i}", flush=True)
    time.sleep(0.02)
print("saved the model", flush=True)
"""


def test_a_pipe_closed_early_stops_the_echo_not_the_experiment(phalanx: Phalanx) -> None:
    """`phalanx run -f ... 2>&1 | head -3`: the supervisor used to die of EPIPE ("the supervisor
    failed: [Errno 32] Broken pipe") and SIGTERM the replica while it was saving its model."""
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python count.py\n")
    (spec.parent / "count.py").write_text(COUNTER)
    proc = subprocess.Popen(
        [*PHALANX, "run", "-f", str(spec)],
        env=phalanx.env, cwd=phalanx.tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    phalanx.started.append(proc)  # type: ignore[arg-type]  # killed at teardown if it hangs
    assert proc.stdout is not None
    head = [proc.stdout.readline() for _ in range(3)]
    assert all(head), head
    proc.stdout.close()  # what `head` does after its third line
    assert proc.wait(timeout=120) == 0
    exp = phalanx.only_experiment()
    assert exp.status == "succeeded", exp.reason
    texts = [line.text for line in phalanx.store().logs(exp.id)]
    assert texts == [f"line {i}" for i in range(60)] + ["saved the model"]
