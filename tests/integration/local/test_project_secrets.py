"""A project's secrets reach its experiments' replicas as environment variables, and no file, log
or console line Phalanx writes shows them; another project's experiments do not get them."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from .conftest import PHALANX, Phalanx

VALUE = "Zq9vKx-s3cr3t-unmistakable-41"

# the replica proves it got the value without printing it: it writes the value's sha256
PROBE = """
import hashlib, os, pathlib
value = os.environ.get("S3_SECRET_KEY")
out = pathlib.Path(os.environ["PROBE_OUT"]) / os.environ["PHALANX_EXPERIMENT_ID"]
out.write_text("none" if value is None else hashlib.sha256(value.encode()).hexdigest())
print("replica done")
"""


def _spec(phalanx: Phalanx, project: str, script: Path) -> Path:
    return phalanx.spec(
        f"""
        version: 1
        kind: experiment
        project: {project}
        run:
          cmd: python {script}
        """,
        name=f"{project}.yml",
    )


def test_a_projects_secret_reaches_its_replicas_and_is_written_nowhere(
    phalanx: Phalanx, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**phalanx.env, "PROBE_OUT": str(out)}
    told = subprocess.run(
        [*PHALANX, "secret", "set", "vision", "S3_SECRET_KEY"],
        input=VALUE + "\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert told.returncode == 0, told.stderr
    consoles = told.stdout + told.stderr
    runs = [  # both projects' experiments at once
        subprocess.Popen(
            [*PHALANX, "run", "-f", str(_spec(phalanx, project, script)), "-o", "json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for project in ("vision", "nlp")
    ]
    phalanx.started.extend(runs)  # killed at teardown if one hangs
    for run in runs:
        stdout, stderr = run.communicate(timeout=240)
        assert run.returncode == 0, stderr
        consoles += stdout + stderr
    listed = subprocess.run([*PHALANX, "secret", "ls", "-o", "json"], env=env, capture_output=True, text=True)
    consoles += listed.stdout + listed.stderr
    assert '"name": "S3_SECRET_KEY"' in listed.stdout
    results = sorted(p.read_text() for p in out.iterdir())
    assert results == sorted([hashlib.sha256(VALUE.encode()).hexdigest(), "none"])
    assert VALUE not in consoles
    # nothing Phalanx wrote holds it: the store, run folders, logs, spools, unit files, the ledger
    for path in phalanx.home.rglob("*"):
        if path.is_file():
            assert VALUE.encode() not in path.read_bytes(), path
