"""`phalanx resume` continues a stopped experiment from its latest checkpoint as a new attempt;
`phalanx rerun` reproduces file, params and code from the snapshot; `phalanx diff` names what changed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .conftest import Phalanx, wait_for

TRAIN = """
import sys, time
from phalanx import Task

task = Task.init()
ckpt = task.latest_checkpoint()
state = task.load_checkpoint() if ckpt is not None else {"epoch": -1, "w": 8.0}
print(f"starts at epoch {state['epoch'] + 1}", flush=True)
for epoch in range(state["epoch"] + 1, 6):
    state = {"epoch": epoch, "w": state["w"] * 0.5}
    task.get_logger().report_scalar("loss", "master", state["w"], iteration=epoch)
    task.save_checkpoint(state, step=epoch, metrics={"loss": state["w"]})
    if epoch == 2 and ckpt is None:
        print("waiting to be stopped", flush=True)
        time.sleep(600)
task.flush()
"""


def test_phalanx_resume_continues_a_stopped_experiment_from_its_latest_checkpoint(phalanx: Phalanx) -> None:
    folder = phalanx.tmp / "exp"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    spec = phalanx.spec("version: 1\nkind: experiment\nrun:\n  cmd: python train.py\n")
    started = phalanx.run("run", "-f", str(spec), "--detach")
    assert started.returncode == 0, started.stderr
    exp_id = started.stdout.strip()
    store = phalanx.store()

    def saved_step_2() -> bool:
        return any(a.name == "checkpoint-2" for a in store.artifacts(exp_id))

    wait_for(saved_step_2, what="the checkpoint of epoch 2")
    assert phalanx.cli("stop", exp_id).returncode == 0
    assert store.get_experiment(exp_id).status == "stopped"

    resumed = phalanx.run("resume", exp_id[:8])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    exp = store.get_experiment(exp_id)
    assert exp.status == "succeeded" and exp.reason is None
    loss = store.metrics(exp_id, "loss")["loss"]["master"]
    assert loss.steps == [0, 1, 2, 3, 4, 5]
    assert loss.values == [8.0 * 0.5 ** (e + 1) for e in range(6)]
    lines = [line.text for line in store.logs(exp_id)]
    assert lines.count("starts at epoch 0") == 1 and lines.count("starts at epoch 3") == 1, lines

    got = json.loads(phalanx.cli("get", exp_id, "-o", "json").stdout)
    attempts = [(a["number"], a["kind"], a["status"], a["checkpoint_step"]) for a in got["attempts"]]
    assert attempts == [(0, "start", "stopped", None), (1, "resume", "succeeded", 2)]

    again = phalanx.cli("resume", exp_id)  # refused: in this process
    assert again.returncode == 2 and "only a failed or stopped one" in again.stderr


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=folder,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_rerun_reproduces_a_dirty_tree_and_diff_names_param_and_code_changes(phalanx: Phalanx) -> None:
    folder = phalanx.tmp / "proj"
    folder.mkdir()
    (folder / "train.py").write_text("import sys\nprint('lr is', sys.argv[1])\nprint('version one')\n")
    (folder / ".venv").mkdir()
    (folder / ".venv" / "pyvenv.cfg").write_text("home = /usr\n")
    spec = phalanx.spec(
        "version: 1\nkind: experiment\nparams:\n  lr: 0.1\nrun:\n  cmd: python train.py {{ lr }}\n",
        folder=folder,
    )
    _git(folder, "init", "-q")
    _git(folder, "add", "train.py", spec.name)
    _git(folder, "commit", "-q", "-m", "first")
    (folder / "train.py").write_text(
        "import sys\nprint('lr is', sys.argv[1])\nprint('version two')\n"
    )  # dirty

    first = phalanx.run("run", "-f", str(spec), "-o", "json")
    assert first.returncode == 0, first.stderr[-2000:]
    a = json.loads(first.stdout)["id"]
    store = phalanx.store()
    record = store.repro(a)
    assert record["git"]["dirty"] and record["git"]["branch"]
    assert (
        "+print('version two')" in record["git"]["diff"] and "-print('version one')" in record["git"]["diff"]
    )
    assert record["snapshot"]["skipped"] == [".git/", ".venv/"]
    # the snapshot holds exactly the recorded change: diffing it against the commit gives the same lines
    import difflib

    from phalanx import repro

    snapshot = repro.source_files(store.artifact_store.read_bytes(a, record["snapshot"]["path"]))
    committed = _git(folder, "show", "HEAD:train.py").splitlines()
    ours = [
        line
        for line in difflib.unified_diff(committed, snapshot["train.py"].decode().splitlines(), lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    recorded = [
        line
        for line in record["git"]["diff"].splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert ours == recorded == ["-print('version one')", "+print('version two')"]
    assert any(p.startswith("PyYAML==") or p.startswith("pydantic==") for p in record["packages"])

    (folder / "train.py").write_text("import sys\nprint('lr is', sys.argv[1])\nprint('version three')\n")
    second = phalanx.run("rerun", a, "--param", "lr=0.5", "-o", "json")
    assert second.returncode == 0, second.stderr[-2000:]
    b = json.loads(second.stdout)["id"]
    lines = [line.text for line in store.logs(b)]
    assert "version two" in lines and "lr is 0.5" in lines  # the snapshot's code, the new param
    assert store.get_experiment(b).plan["command"] == "python train.py 0.5"

    diff = json.loads(phalanx.cli("diff", a, b, "-o", "json").stdout)
    assert diff["params"] == {"lr": {"a": 0.1, "b": 0.5}}
    assert diff["code"] == []  # the same snapshot
    # the rerun ran the original's code: it carries its commit and diff, not "not a git work tree"
    rerun_git = store.repro(b)["git"]
    assert rerun_git["commit"] == record["git"]["commit"] and rerun_git["from"] == a
    assert rerun_git["diff"] == record["git"]["diff"]
    assert diff["git"] == {}, diff["git"]
    assert f"as the snapshot of {a} recorded it" in phalanx.cli("get", b).stdout

    third = phalanx.run("run", "-f", str(spec), "-o", "json")  # version three, from the folder
    c = json.loads(third.stdout)["id"]
    text = phalanx.cli("diff", a, c)
    assert text.returncode == 0
    assert "-print('version two')" in text.stdout and "+print('version three')" in text.stdout
