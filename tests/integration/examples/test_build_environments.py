"""`build.pip_packages` through `phalanx run`: the replicas run in the experiment's own venv and still
report through `phalanx`; a build that cannot succeed is refused with exit 2 and leaves nothing.

A tiny hand-made wheel and PIP_NO_INDEX keep these fast and offline; the TensorFlow and MXNet venvs
are exercised by test_framework_examples.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.integration.install.test_buildenv import write_wheel
from tests.support.cli import phalanx_cli
from tests.support.sandbox import wait_gone

from .test_framework_examples import phalanx

SCRIPT = """\
import os, sys
import tinypkg
import phalanx
try:
    import typer  # in Phalanx's own venv, not in this one
    isolated = 0.0
except ImportError:
    isolated = 1.0
phalanx.log_metrics(step=0, isolated=isolated, tinypkg=float(tinypkg.VERSION))
print("prefix", sys.prefix, flush=True)
"""


def experiment_file(folder: Path, packages: list[str], script: str = SCRIPT) -> Path:
    (folder / "train.py").write_text(script)
    lines = "".join(f"    - {json.dumps(p)}\n" for p in packages)
    path = folder / "polyaxonfile.yml"
    path.write_text(
        "version: 1\nkind: experiment\nframework: pytorch\n"
        "environment:\n  replicas:\n    n_workers: 1\n"
        f"build:\n  pip_packages:\n{lines}  env_vars:\n    - [PIP_NO_INDEX, '1']\n"
        "run:\n  cmd: python train.py\n"
    )
    return path


def test_replicas_run_in_the_build_venv_and_report_through_phalanx(
    phalanx_home: Path, tmp_path: Path
) -> None:
    write_wheel(tmp_path / "wheels")
    path = experiment_file(tmp_path, ["./wheels/tinypkg-1.0-py3-none-any.whl"])
    done = phalanx("run", "-f", str(path), "-o", "json", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    exp_id = json.loads(done.stdout)["id"]
    venvs = [p for p in (phalanx_home / "venvs").iterdir() if not p.name.startswith(".")]
    assert len(venvs) == 1
    logs = phalanx_cli("logs", exp_id)
    assert f"prefix {venvs[0]}" in logs.stdout, logs.stdout + logs.stderr
    # the build's progress is the experiment's console, before the replicas' lines
    build = [line for line in logs.stdout.splitlines() if line.startswith("[build] ")]
    assert sum("Successfully installed tinypkg-1.0" in line for line in build) == 1, logs.stdout  # once
    assert build[-1].startswith("[build] environment ready in "), logs.stdout
    assert logs.stdout.splitlines()[: len(build)] == build, logs.stdout
    metrics = json.loads(phalanx_cli("metrics", exp_id, "-o", "json").stdout)
    assert {s: v["values"] for s, v in metrics["isolated"].items()} == {"master": [1.0], "worker-0": [1.0]}
    assert metrics["tinypkg"]["master"]["values"] == [1.0]


@pytest.fixture
def slow_wheel(tmp_path: Path) -> Iterator[str]:
    """tinypkg's wheel over HTTP on loopback, answered 6 s after it is asked for: a pip that says
    nothing for that long (a big download, a slow index)."""
    wheel = write_wheel(tmp_path / "served")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(6)
            body = wheel.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{wheel.name}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_silent_pip_gets_a_heartbeat_in_the_console(
    phalanx_home: Path, tmp_path: Path, slow_wheel: str
) -> None:
    """A real pip waiting on a slow download: while it says nothing, `still building` lines with
    the time and pip's last line (PHALANX_BUILD_HEARTBEAT: 1 s here, 30 s by default), in the run's
    output and in the experiment's stored console."""
    path = experiment_file(tmp_path, [slow_wheel])
    done = phalanx_cli("run", "-f", path, "-o", "json", env={"PHALANX_BUILD_HEARTBEAT": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    beats = [
        line for line in done.stderr.splitlines() + done.stdout.splitlines() if "still building (" in line
    ]
    waiting = [b for b in beats if "pip install of build.pip_packages; pip's last line: Collecting " in b]
    assert len(waiting) >= 2, beats  # 6 s of a silent download: a line every second or so
    stored = phalanx_cli("logs", json.loads(done.stdout)["id"]).stdout
    assert sum(line.startswith("[build] still building (") for line in stored.splitlines()) == len(beats)


def test_a_package_pip_cannot_find_is_refused_with_pip_words_and_nothing_left(
    phalanx_home: Path, tmp_path: Path
) -> None:
    path = experiment_file(tmp_path, ["surely-not-a-package-phalanx==0.0.1"])
    done = phalanx_cli("run", "-f", path)  # in this process: a refusal (the run smoke is the test above)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "No matching distribution found for surely-not-a-package-phalanx" in done.stderr
    # the foreground run printed pip's lines as they came, as the console's source `build`
    assert "[build] pip install of build.pip_packages" in done.stdout, done.stdout
    assert "[build] ERROR: No matching distribution found" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr
    venvs = phalanx_home / "venvs"
    assert [p.name for p in venvs.iterdir() if not p.name.endswith(".lock")] == []
    # it existed while it built (status building), and says why it ended
    (failed,) = json.loads(phalanx_cli("ls", "-o", "json").stdout)
    assert failed["status"] == "failed", failed
    assert "No matching distribution found" in failed["reason"], failed
    logs = phalanx_cli("logs", failed["id"])  # pip's words are in its console too, stored before its end
    assert "[build] ERROR: No matching distribution found" in logs.stdout, logs.stdout + logs.stderr


def test_an_experiment_exists_before_its_environment_is_built_and_detach_does_not_wait_for_it(
    phalanx_home: Path, tmp_path: Path
) -> None:
    """`phalanx run --detach` of a file with build.pip_packages prints the id at once: the
    experiment is in `phalanx ls` as building while pip runs (here: while the test holds the
    environment's build lock, as another build of it would), and its log says so."""
    import fcntl

    from phalanx.buildenv import env_hash
    from phalanx.plan import build_plan
    from phalanx.spec.loader import load_spec

    write_wheel(tmp_path / "wheels")
    path = experiment_file(tmp_path, ["./wheels/tinypkg-1.0-py3-none-any.whl"])
    key = env_hash(build_plan(load_spec(path)).build, tmp_path)
    (phalanx_home / "venvs").mkdir()
    with open(phalanx_home / "venvs" / f".{key}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = phalanx("run", "--detach", "-o", "json", "-f", str(path), timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        started = json.loads(done.stdout)
        exp_id = started["id"]
        (listed,) = json.loads(phalanx_cli("ls", "-o", "json").stdout)
        assert (listed["id"], listed["status"]) == (exp_id, "building")
        fcntl.flock(lock, fcntl.LOCK_UN)
    logs = phalanx_cli("logs", exp_id, "--follow")
    assert "prefix" in logs.stdout, logs.stdout + logs.stderr
    # its console said what it waited for (another build of the same venv), then built it
    assert f"[build] waiting for another experiment's build of environment {key}" in logs.stdout, logs.stdout
    (ended,) = json.loads(phalanx_cli("ls", "-o", "json").stdout)
    assert ended["status"] == "succeeded", ended
    wait_gone(started["supervisor_pid"], timeout=120)  # it has recorded the end: now it exits
    log = (phalanx_home / "runs" / exp_id / "supervisor.log").read_text()
    assert "building its environment" in log and "environment ready" in log, log


def test_an_unpinned_torch_is_refused_before_anything_starts(phalanx_home: Path, tmp_path: Path) -> None:
    path = experiment_file(tmp_path, ["torch>=2"])
    for extra in ([], ["--dry-run"]):
        done = phalanx_cli("run", "-f", path, *extra)  # in this process: refused before anything starts
        assert done.returncode == 2, done.stdout + done.stderr
        assert "torch==2.13.0" in done.stderr and "Traceback" not in done.stderr
    for folder in (phalanx_home / "venvs", phalanx_home / "spool"):  # nothing built, nothing started
        assert not folder.exists() or not any(folder.iterdir()), folder
