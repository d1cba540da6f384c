"""A replica's console lines reach the terminal before its end is announced: its reaper, forked from
the supervisor, may end a short job before the replica's log reader has read a line (QA, issue 42:
"master succeeded" came first in 4 runs of 6)."""

from __future__ import annotations

import subprocess

from tests.integration.local.conftest import PHALANX, Phalanx


def test_a_short_replicas_lines_come_before_its_end(phalanx: Phalanx) -> None:
    spec = phalanx.spec('version: 1\nkind: experiment\nrun:\n  cmd: sh -c "echo a; echo b; echo c"\n')
    for _ in range(5):  # the race it guards against lost most runs
        done = subprocess.run(
            [*PHALANX, "run", "-f", str(spec)],
            env={**phalanx.env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, in the order the CLI wrote it
            text=True,
            cwd=phalanx.tmp,
            timeout=180,
        )
        assert done.returncode == 0, done.stdout
        lines = done.stdout.splitlines()
        end = next(i for i, line in enumerate(lines) if line.startswith("phalanx: master succeeded"))
        shown = [i for i, line in enumerate(lines) if line.startswith("[master] ")]
        assert len(shown) == 3 and max(shown) < end, done.stdout
