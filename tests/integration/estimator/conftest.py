"""Submitting estimators for real: each test gets its own PHALANX_HOME; every supervisor a test
started is stopped (its own process group, SIGTERM then SIGKILL) at teardown."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.runs import Run


def stop_group(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """The supervisor runs in its own session (pgid = its pid): stop that group, then reap it."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace)


@pytest.fixture
def runs(phalanx_home: Path) -> Iterator[list[Run]]:
    """Append every Run a test submits; their supervisors are stopped afterwards."""
    started: list[Run] = []
    yield started
    for run in started:
        proc = run._process
        if proc is not None:
            stop_group(proc)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A source_directory with small stdlib-only scripts (no torch: these tests are about the run)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello.py").write_text(
        "import os, sys\n"
        "keys = ('PHALANX_REPLICA', 'RANK', 'LOCAL_RANK', 'NODE_RANK', 'WORLD_SIZE')\n"
        "env = ' '.join(f'{k}={os.environ.get(k)}' for k in keys)\n"
        "print('hello', env, 'argv', sys.argv[1:], flush=True)\n"
        "if os.environ.get('FAIL_RANK') == os.environ.get('RANK'):\n"
        "    print('rank failing on purpose', flush=True)\n"
        "    sys.exit(3)\n"
    )
    (src / "report.py").write_text(
        "from phalanx import Task\n"
        "task = Task.init(project_name='estimator-tests', task_name='report')\n"
        "for i in range(3):\n"
        "    task.get_logger().report_scalar('loss', 'worker 00', value=1.0 / (i + 1), iteration=i)\n"
        "task.upload_artifact('stats', artifact_object={'answer': 42})\n"
        "task.close()\n"
    )
    (src / "sleepy.py").write_text(
        "import os, time\nprint('sleeping pid', os.getpid(), flush=True)\ntime.sleep(600)\n"
    )
    return src
