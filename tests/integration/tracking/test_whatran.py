"""A plain script (`python train.py` with Task.init, no `phalanx run`) records what it ran, as a
launched experiment does: git commit and uncommitted diff, packages, versions, host, and a snapshot
of its folder; `phalanx diff` then compares two plain runs' code. PHALANX_RECORD_SOURCE=0: nothing."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile

from tests.support.sandbox import Sandbox, wait_gone

SCRIPT = """
import os
from phalanx import Task
task = Task.init("examples", "whatran")
LR = 0.1
print("ID", task.id, "ingester", os.environ.get("PHALANX_INGESTER_PID", "0"))
"""


def _git(sandbox: Sandbox, *args: str) -> None:
    subprocess.run(["git", *args], cwd=sandbox.home.parent, check=True, capture_output=True)


def _run(sandbox: Sandbox, code: str) -> str:
    done = sandbox.run(code)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split("ID ", 1)[1].split()
    wait_gone(int(words[2]))  # the detached ingester drains and exits after the script
    return words[0]


def test_a_plain_script_records_its_commit_diff_packages_and_snapshot(sandbox: Sandbox) -> None:
    sandbox.script(SCRIPT)
    _git(sandbox, "init", "-q")
    _git(sandbox, "-c", "user.email=t@t", "-c", "user.name=t", "add", "script.py")
    _git(sandbox, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "first")
    first = _run(sandbox, SCRIPT)
    second = _run(sandbox, SCRIPT.replace("LR = 0.1", "LR = 0.5"))  # an uncommitted change

    store = sandbox.store()
    record = store.repro(second)
    assert record["git"]["commit"] and "+LR = 0.5" in record["git"]["diff"]
    assert any(p.startswith("phalanx==") for p in record["packages"])
    assert list((sandbox.home / "cache" / "packages").glob("*.json"))  # kept for the next run
    assert record["python"] and record["host"]
    assert record["script"]["command"][1].endswith("script.py")
    assert store.repro(first)["git"]["commit"] == record["git"]["commit"]
    # the snapshot holds the script as it ran, not the Phalanx home beside it
    assert store.artifact_store is not None
    data = store.artifact_store.read_bytes(second, record["snapshot"]["path"])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        member = tar.extractfile("script.py")
        assert member is not None and b"LR = 0.5" in member.read()
    assert not [n for n in names if n.startswith("home")], names
    assert "home/" in record["snapshot"]["skipped"]

    diff = sandbox.cli("diff", first, second, "-o", "json")
    assert diff.returncode == 0, diff.stderr
    doc = json.loads(diff.stdout)
    assert "+LR = 0.5" in doc["code"] and "-LR = 0.1" in doc["code"]  # the changed line, from the snapshots
    assert doc["packages"] == {}  # both recorded, the same
    text = sandbox.cli("diff", first, second)
    assert "+LR = 0.5" in text.stdout
    assert "not compared" not in text.stdout, text.stdout  # a plain script never has an experiment file


def test_record_source_off_records_nothing(sandbox: Sandbox) -> None:
    sandbox.env["PHALANX_RECORD_SOURCE"] = "0"
    exp = _run(sandbox, SCRIPT)
    assert sandbox.store().repro(exp) == {}
