"""upload_artifact: every kind of object a user passes ends up as a file of the experiment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tests.support.sandbox import Sandbox, wait_gone

SCRIPT = """
import pathlib
import numpy as np, pandas as pd
from PIL import Image
from phalanx import Task
task = Task.init("examples", "artifacts")
folder = pathlib.Path("a-folder"); (folder / "sub").mkdir(parents=True, exist_ok=True)
(folder / "x.txt").write_text("x"); (folder / "sub" / "y.txt").write_text("yy")
pathlib.Path("notes.md").write_text("# notes")
task.upload_artifact("temp 00", artifact_object={"worker_rank": 0})
task.upload_artifact("list", [1, 2, 3])
task.upload_artifact("notes", "notes.md")
task.upload_artifact("folder", folder)
task.upload_artifact("array", np.arange(6).reshape(2, 3))
task.upload_artifact("frame", pd.DataFrame({"a": [1, 2], "b": [3, 4]}))
task.upload_artifact("picture", Image.new("RGB", (4, 3), "red"), metadata={"note": "red"})
task.upload_artifact("raw", b"\\x00\\x01")
for bad in ("../escape", "a/b", "", "two\\nlines"):
    try:
        task.upload_artifact(bad, {})
    except Exception as exc:
        print("REFUSED", type(exc).__name__)
try:
    task.upload_artifact("missing", "no/such/file.txt")
except Exception as exc:
    print("REFUSED", type(exc).__name__, exc)
"""


def test_every_kind_of_artifact_is_stored(sandbox: Sandbox, tmp_path: Path) -> None:
    done = sandbox.run(SCRIPT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("REFUSED UsageError") == 5
    assert "neither a file nor a folder" in done.stdout
    store = sandbox.ingested()
    exp = sandbox.only_experiment(store)
    records = {a.name: a for a in store.artifacts(exp)}
    assert {n: r.kind for n, r in records.items()} == {
        "temp 00": "json", "list": "json", "notes": "file", "folder": "folder", "array": "numpy",
        "frame": "pandas", "picture": "image", "raw": "bytes",
    }  # fmt: skip
    files = store.artifact_store
    assert files is not None
    assert json.loads(files.read_bytes(exp, records["temp 00"].path)) == {"worker_rank": 0}
    assert files.read_bytes(exp, records["notes"].path) == b"# notes"
    folder = records["folder"].path  # artifacts/<writing process>/folder/a-folder
    assert folder.startswith("artifacts/") and folder.endswith("/folder/a-folder")
    assert files.list(exp, folder) == [f"{folder}/sub/y.txt", f"{folder}/x.txt"]
    assert records["folder"].size == 3
    out = files.download(exp, records["array"].path, tmp_path / "dl")
    assert np.load(out).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert files.read_bytes(exp, records["frame"].path).decode().splitlines()[0] == ",a,b"
    assert files.read_bytes(exp, records["picture"].path)[:4] == b"\x89PNG"
    assert records["picture"].metadata == {"note": "red"}
    assert files.read_bytes(exp, records["raw"].path) == b"\x00\x01"


SAME_NAME = """
import os, subprocess, sys
from phalanx import Task
task = Task.init("examples", "same name")
task.upload_artifact("checkpoint", {"rank": 0, "epoch": 1})
task.upload_artifact("checkpoint", {"rank": 0, "epoch": 2})
task.flush()
child = (
    "from phalanx import Task; t = Task.current_task(); import os; r = int(os.environ['RANK'])\\n"
    "t.upload_artifact('checkpoint', {'rank': r, 'epoch': 1})\\n"
    "t.upload_artifact('checkpoint', {'rank': r, 'epoch': 2})\\n"
)
for rank in (1, 2):
    subprocess.run([sys.executable, "-c", child], env={**os.environ, "RANK": str(rank)}, check=True)
print("INGESTER", os.environ["PHALANX_INGESTER_PID"])
"""


def test_ranks_uploading_the_same_name_keep_one_artifact_each(sandbox: Sandbox) -> None:
    """The same process uploading a name again replaces it; another rank's upload of a name already
    held is stored as 'NAME [replica rank N]', in its own file: nothing is overwritten silently."""
    done = sandbox.run(SAME_NAME)
    assert done.returncode == 0, done.stderr
    wait_gone(int(done.stdout.split("INGESTER")[1].split()[0]))  # the script's ingester has finished
    store = sandbox.ingested()
    exp = sandbox.only_experiment(store)
    records = {a.name: a for a in store.artifacts(exp)}
    assert sorted(records) == ["checkpoint", "checkpoint [master rank 1]", "checkpoint [master rank 2]"]
    assert len({r.path for r in records.values()}) == 3
    files = store.artifact_store
    assert files is not None
    for name, rank in (
        ("checkpoint", 0),
        ("checkpoint [master rank 1]", 1),
        ("checkpoint [master rank 2]", 2),
    ):
        assert records[name].rank == rank
        assert json.loads(files.read_bytes(exp, records[name].path)) == {"rank": rank, "epoch": 2}
