"""A bad record never takes good ones with it: one over-long metric name among 1,000 good points
used to make ingest drop the whole spool record (all 1,000) while flush() said True."""

from __future__ import annotations

import json

from tests.integration.durability.figures import figure
from tests.support.sandbox import Sandbox, wait_gone

from phalanx.ingest import Ingester
from phalanx.spool import SpoolWriter, encode_points, read_refused

BAD_NAME = """
import json, logging
from phalanx import Task
task = Task.init("faults", "bad-name")
logger = task.get_logger()
for i in range(1000):
    logger.report_scalar("loss", "master", 1.0 / (i + 1), i)
    if i == 500:
        logger.report_scalar("x" * 300, "master", 1.0, i)        # a name the store cannot hold
logger.report_scalar("step", "master", 1.0, 2**70)               # a step beyond 64 bits
logger.report_text("t" * (2 << 20), title="huge")                # truncated, not refused
task.connect({"k" * 300: 1, "fine": 2})
first = task.flush()
print("RESULT", json.dumps({"first": first, "problems": task.flush_problems, "second": task.flush()}))
import os; print("ID", task.id, "INGESTER", os.environ["PHALANX_INGESTER_PID"])
"""


def test_an_overlong_name_drops_only_itself_and_flush_says_so(sandbox: Sandbox) -> None:
    done = sandbox.run(BAD_NAME)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["first"] is False and result["second"] is True  # said once, for what was refused
    problems = " | ".join(result["problems"])
    assert "300 characters long" in problems and "64 bits" in problems, problems
    assert "will not be stored" in done.stderr  # logged too, with why
    exp_id = done.stdout.split("ID ", 1)[1].split()[0]
    wait_gone(int(done.stdout.split("INGESTER ", 1)[1].split()[0]))
    store = sandbox.store()
    metrics = store.metrics(exp_id)
    assert metrics["loss"]["master"].steps == list(range(1000))  # every good point
    assert set(metrics) == {"loss"}
    text = store.texts(exp_id)[0]["text"]
    assert len(text) < (2 << 20) and text.endswith("more characters]")
    assert {(p.key, p.value) for p in store.params(exp_id) if p.section == "General"} == {("fine", 2)}
    steps = metrics["loss"]["master"].steps
    figure(
        "300-char metric name among 1,000 good points",
        reported=1002,
        stored=len(steps),
        duplicated=len(steps) - len(set(steps)),
        refused=2,
        flush=result["first"],
    )


def test_ingest_splits_a_bad_key_out_of_a_record_written_by_an_older_sdk(sandbox: Sandbox) -> None:
    """A spool record holding a bad name (an older SDK, a hand-written spool): the good points of
    that very record are stored and the writer is told why the rest was not."""
    spool = sandbox.home / "spool" / "abc123def456"
    store = sandbox.store()
    with SpoolWriter(spool, experiment_id="abc123def456") as w:
        w.write("experiment", {"name": "old", "project": "faults"})
        points = [("loss", "m", i, float(i), 1.0) for i in range(1000)] + [("y" * 300, "m", 0, 1.0, 1.0)]
        w.write("scalar", encode_points(points))
        stream = w.stream
    Ingester(store, None, sandbox.home / "spool", cleanup=False).run_once()
    assert store.metrics("abc123def456")["loss"]["m"].steps == list(range(1000))
    reasons, _ = read_refused(spool, stream, 0)
    assert len(reasons) == 1 and "record 1" in reasons[0] and "longer than 255" in reasons[0]
