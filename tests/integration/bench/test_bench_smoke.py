"""The benches still run: every bench script imports, and the light ones run `--smoke` here.

`make bench` broke once without anyone seeing it (bench/sweep.py called a function a refactor
removed): mypy now covers bench/, every script is imported here (a missing name, a bad import), and
the scripts whose smoke run costs a few seconds run it (tiny sizes, one round). The heavy ones (a
DDP launch, a sweep, servers under load, serving: 10 to 20 s each, the product paths they drive are
the suite's own tests) run their smoke in `make bench-smoke`, which runs every script that way.
Figures are not asserted: timing belongs to the benches themselves, not to the suite.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import REPO

SCRIPTS = sorted((REPO / "bench").glob("*.py"))
# the scripts whose --smoke takes a few seconds (measured on the 2-core VM, quiet: 1 to 8 s each)
LIGHT = [
    "cli",
    "compare",
    "console",
    "console_capture",
    "dedup",
    "install",
    "integrations",
    "query",
    "server_load",
    "system_metrics",
]


def bench_env() -> dict[str, str]:
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
    )


def test_every_bench_script_is_found_and_make_bench_smoke_runs_each() -> None:
    names = {p.stem for p in SCRIPTS}
    assert names >= {"launch", "tracking", "sweep", "server_load", "scale", "query", "serve", *LIGHT}
    smoke = (REPO / "Makefile").read_text().split("\nbench-smoke:", 1)[1].split("\n\n", 1)[0]
    assert "bench/*.py" in smoke and "--smoke" in smoke


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_bench_script_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    monkeypatch.setattr(sys, "path", list(sys.path))  # some set their own (bench/ must not shadow queue)
    spec.loader.exec_module(module)  # its main() runs only as __main__
    assert callable(module.main), f"bench/{script.name} has no main()"


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT)
def test_a_light_bench_runs_at_tiny_sizes(name: str, phalanx_home: Path, tmp_path: Path) -> None:
    script = REPO / "bench" / f"{name}.py"
    done = subprocess.run(
        [sys.executable, str(script), "--smoke"],
        cwd=tmp_path,
        env=bench_env(),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, (
        f"{script.name} --smoke exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
