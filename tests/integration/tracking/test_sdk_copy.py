"""The standard-library-only SDK copy that experiments with their own venv get on PYTHONPATH
(sdkcopy.sdk_path): every module of it imports in a bare interpreter (no site-packages), and
log_metrics, an artifact upload and save_model work through it; the data reaches the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import phalanx_cli

from phalanx.config import Settings
from phalanx.sdkcopy import sdk_path

PHALANX = Path(sys.executable).parent / "phalanx"

BARE_SCRIPT = """
import importlib, json, pathlib, sys
sys.path.insert(0, {sdk!r})
assert not [p for p in sys.path if "site-packages" in p], sys.path
for heavy in ("yaml", "pydantic", "sqlalchemy", "typer"):
    try:
        importlib.import_module(heavy)
    except ImportError:
        pass
    else:
        raise SystemExit(f"{{heavy}} is importable: not a bare interpreter")
for name in {modules!r}:
    importlib.import_module(name)
import phalanx
from phalanx import Task
from phalanx.errors import UsageError
task = Task.init("sdk", "bare")
phalanx.log_metrics(step=0, loss=0.5)
phalanx.log_metrics(step=1, loss=0.25)
notes = pathlib.Path("notes.txt")
notes.write_text("from a bare interpreter")
task.upload_artifact("notes", notes)
try:
    task.save_model(object(), "net", None)
except UsageError as exc:
    print("SAVE_MODEL:", exc)
task.close()
print("ID:", task.id)
"""


def sdk_modules(root: Path) -> list[str]:
    return sorted(
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for p in (root / "phalanx").rglob("*.py")
    )


def test_every_module_of_the_sdk_copy_imports_and_reports_in_a_bare_interpreter(
    phalanx_home: Path, tmp_path: Path
) -> None:
    sdk = sdk_path(Settings().home)
    modules = sdk_modules(sdk)
    assert {"phalanx", "phalanx.errors", "phalanx.tracking.models", "phalanx.tracking.task"} <= set(modules)
    script = BARE_SCRIPT.format(sdk=str(sdk), modules=modules)
    env = {"PATH": os.environ["PATH"], "PHALANX_HOME": str(phalanx_home), "HOME": str(tmp_path)}
    # -I: no PYTHON* variables, no user site; -S: no site module, so no site-packages at all
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SAVE_MODEL: save_model needs torch" in done.stdout  # phalanx.errors was there to say it
    exp_id = done.stdout.split("ID:")[1].split()[0]

    # the bare interpreter could not start an ingester: the next `phalanx` command ingests the spool
    def cli(*args: str) -> str:  # in this process (tests/support/cli.py)
        out = phalanx_cli(*args, env={"PHALANX_HOME": str(phalanx_home)})
        assert out.returncode == 0, out.stderr
        return out.stdout

    metrics = json.loads(cli("metrics", exp_id, "-o", "json"))
    assert [v for s in metrics["loss"].values() for v in s["values"]] == [0.5, 0.25]
    assert "notes" in cli("artifacts", exp_id)
    assert json.loads(cli("ls", "-o", "json"))[0]["status"] == "succeeded"
