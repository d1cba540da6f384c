"""Each attempt records what it ran: after `phalanx resume` with an edited script, the experiment's
record is the code that produced its result, `phalanx get` and `phalanx diff ID` show what changed
between the attempts, and `phalanx rerun` reruns the successful attempt's code (`--attempt N`
another's)."""

from __future__ import annotations

import json

from .conftest import Phalanx

BROKEN = "print('version one')\nraise SystemExit(3)\n"
FIXED = "print('version two')\n"


def test_a_resume_after_an_edit_records_the_code_that_succeeded(phalanx: Phalanx) -> None:
    folder = phalanx.tmp / "proj"
    folder.mkdir()
    (folder / "train.py").write_text(BROKEN)
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python train.py\n", folder=folder)
    first = phalanx.run("run", "-f", str(spec), "-o", "json")
    assert first.returncode == 1, first.stderr[-2000:]
    exp_id = json.loads(first.stdout)["id"]

    (folder / "train.py").write_text(FIXED)  # the user fixes the script and resumes
    resumed = phalanx.run("resume", exp_id)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    store = phalanx.store()
    from phalanx import repro

    record = store.repro(exp_id)
    latest = repro.source_files(store.artifact_store.read_bytes(exp_id, record["snapshot"]["path"]))
    assert latest["train.py"].decode() == FIXED  # what produced the succeeded result
    assert [a["attempt"] for a in record["attempts"]] == [0, 1]

    got = json.loads(phalanx.cli("get", exp_id, "-o", "json").stdout)
    assert [(a["number"], a["status"], (a.get("code") or {}).get("changed")) for a in got["attempts"]] == [
        (0, "failed", None),
        (1, "succeeded", ["train.py"]),
    ]
    assert "code changed: train.py" in phalanx.cli("get", exp_id).stdout

    diff = json.loads(phalanx.cli("diff", exp_id, "-o", "json").stdout)
    assert (diff["a"], diff["b"]) == (f"{exp_id}@0", f"{exp_id}@1")
    assert "-print('version one')" in diff["code"] and "+print('version two')" in diff["code"]

    rerun = phalanx.run("rerun", exp_id, "-o", "json")  # the successful attempt's code: it succeeds
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    again = json.loads(rerun.stdout)["id"]
    assert "version two" in [line.text for line in store.logs(again)]

    old = phalanx.run("rerun", exp_id, "--attempt", "0", "-o", "json")  # the user asks for the first
    assert old.returncode == 1, old.stderr[-2000:]
    assert "version one" in [line.text for line in store.logs(json.loads(old.stdout)["id"])]

    missing = phalanx.cli("rerun", exp_id, "--attempt", "7")  # refused: in this process
    assert missing.returncode == 2 and "attempt 7" in missing.stderr and "Traceback" not in missing.stderr
