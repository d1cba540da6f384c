"""A plain script's console is read by its detached ingester, which copies it to the terminal. A
script whose stdout is a file (`python train.py > out.log; tail out.log`) must not exit before its
last lines are in that file: a reader of the file right after the exit saw none of them."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.tracking.conftest import Sandbox

SCRIPT = """
from phalanx import Task
Task.init("qa", "tofile")
for i in range(3000):
    print("line", i)
print("LAST")
"""


def test_every_line_is_in_the_redirected_file_when_the_script_exits(sandbox: Sandbox) -> None:
    path = sandbox.script(SCRIPT)
    out = sandbox.home.parent / "out.log"
    for _ in range(3):
        with open(out, "w") as f:
            done = subprocess.run(
                [sys.executable, str(path)], env=sandbox.env, stdout=f, stderr=subprocess.STDOUT,
                cwd=sandbox.home.parent, timeout=120,
            )  # fmt: skip
        assert done.returncode == 0
        lines = out.read_text().splitlines()  # read at once, as `; tail out.log` does
        assert len(lines) == 3001 and lines[-1] == "LAST", lines[-3:]
