"""`phalanx group ...` mistakes a tired user makes: each is a clear message, the right exit status
and no traceback (groups need no Optuna for these: nothing is run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PHALANX = Path(sys.executable).parent / "phalanx"


def phalanx(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PHALANX), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_group_ls_with_an_unknown_output_format_is_refused(phalanx_home: Path) -> None:
    done = phalanx("group", "ls", "-o", "yaml")
    assert done.returncode == 2, done.stdout
    assert "-o 'yaml': use table or json" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
