"""A `kind: notebook` file started on a real server: its kernels run in the file's build environment
(built as the project's account, in its box), and it holds the cores and memory its resources ask
for in the machine's ledger while it runs, refusing another notebook that does not fit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.integration.server.serverproc import running_server
from tests.integration.server.test_notebook_service import _execute
from tests.integration.server.test_remote_commands import ok, phalanx
from tests.integration.server.test_services import _call, service_processes
from tests.unit.server.teams_fixtures import make_team

from phalanx.config import Settings
from phalanx.machine.ledger import Ledger, ledger_path
from phalanx.services.seats import cgroup_name
from phalanx.store import open_store

pytestmark = pytest.mark.slow

# a package this machine's own index holds and Phalanx's environment does not: the file's build
# takes it from there (never the network), so a kernel that imports it runs in the build's venv
NOTEBOOK = """\
version: 1
kind: notebook
project: A
build:
  pip_packages: [mergedeep==1.3.4]
  env_vars: {PIP_INDEX_URL: "file:///opt/pypi/simple", PIP_EXTRA_INDEX_URL: "file:///opt/pypi/simple"}
environment:
  resources:
    cpu: {limits: 1}
    memory: {limits: 768Mi}
"""
CELL = (
    "import os, sys, mergedeep, phalanx\n"
    "try:\n    import torch\nexcept ImportError:\n    torch = None\n"
    "print('PREFIX', sys.prefix, 'CORES', len(os.sched_getaffinity(0)),"
    " 'OMP', os.environ.get('OMP_NUM_THREADS'), 'TORCH', torch is not None, 'SDK', phalanx.__file__,"
    " 'CGROUP', [line.split(':')[2] for line in open('/proc/self/cgroup')"
    " if line.split(':')[1] in ('memory', '')][0])"
)


def _notebook_entries(home: Path) -> list[tuple[str, tuple[int, ...], float]]:
    holding, _, _ = Ledger(ledger_path(home)).snapshot()
    return [
        (e.experiment_id, e.cpus, e.need.memory_mib)
        for e in holding
        if e.experiment_id.startswith("notebook-")
    ]


def test_a_notebook_file_runs_its_kernels_in_its_build_and_holds_its_resources(tmp_path: Path) -> None:
    home = tmp_path / "server-home"
    store = open_store(Settings(home=home))
    tokens = make_team(store).tokens
    store.close()
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    (laptop / "notebook.yml").write_text(NOTEBOOK)
    (laptop / "helpers.py").write_text("ANSWER = 42\n")  # the project's code, sent with the file
    (laptop / "data").mkdir()
    (laptop / "data" / "big.bin").write_bytes(b"0" * 1000)  # a data folder is not sent, as for a submit
    with running_server(home, args=["--notebooks"], cpus=[0, 1]) as server:  # a machine of 2 cores
        started = json.loads(
            ok(
                phalanx(
                    laptop,
                    "notebook",
                    "start",
                    "-f",
                    str(laptop / "notebook.yml"),
                    "-o",
                    "json",
                    "--server",
                    server.url,
                    token=tokens["editor_a"],
                )
            ).stdout
        )
        assert started["started"] and started["project"] == "A"
        assert started["environment"].startswith("environment ")
        assert started["holds"].startswith("cores ") and "768Mi (capped)" in started["holds"]
        [(key, cores, memory)] = _notebook_entries(home)
        assert key == f"notebook-{started['id']}" and len(cores) == 1 and memory == 768

        base = f"{server.url}{started['path']}"
        status, kernel = _call(f"{base}api/kernels", tokens["editor_a"], "POST", {})
        assert status == 201, kernel
        channels = f"{base.replace('http://', 'ws://')}api/kernels/{kernel['id']}/channels"
        said = _execute(channels, CELL, header=[f"Authorization: Bearer {tokens['editor_a']}"]).split()
        seen = dict(zip(said[::2], said[1::2], strict=True))
        assert Path(seen["PREFIX"]).parent == home / "venvs"  # the file's build, not Phalanx's own
        assert seen["TORCH"] == "False"  # nothing of Phalanx's environment leaks into it
        assert seen["CORES"] == "1" and seen["OMP"] == "1"
        assert Path(seen["SDK"]).is_relative_to(home / "sdk")  # the tracking SDK's copy, as replicas get
        assert Path(seen["CGROUP"]).name == cgroup_name(Ledger(ledger_path(home)), key)  # capped there
        # the laptop's folder is in the project's notebook folder's code/, the project account's
        code = home / "notebooks" / "A" / "code"
        assert sorted(p.name for p in code.iterdir()) == ["helpers.py", "notebook.yml"]
        assert (code / "helpers.py").stat().st_uid == os.stat(home / "notebooks" / "A").st_uid != 0
        cell = f"import sys; sys.path.insert(0, {str(code)!r}); import helpers; print(helpers.ANSWER)"
        imported = _execute(channels, cell, header=[f"Authorization: Bearer {tokens['editor_a']}"])
        assert imported.strip() == "42"
        limit = Path(f"/sys/fs/cgroup/memory{seen['CGROUP']}/memory.limit_in_bytes")
        assert not limit.exists() or int(limit.read_text()) == 768 * 1024 * 1024

        # another project's notebook that needs both cores does not fit beside it: said at once
        too_big = {"kind": "notebook", "project": "B", "resources": {"cpu": {"limits": 2}}}
        status, refused = _call(f"{server.url}/api/v1/services", tokens["admin_b"], "POST", too_big)
        assert status == 409, refused
        assert (
            b"held by service notebook-" in refused and b"(notebook of project A)" in refused
        )  # who holds it
        assert b"a service does not queue" in refused and b"--no-wait" not in refused
        assert len(_notebook_entries(home)) == 1

        ok(
            phalanx(
                laptop, "notebook", "stop", started["id"], "--server", server.url, token=tokens["editor_a"]
            )
        )
        assert not service_processes(home, started["id"])
        assert _notebook_entries(home) == []  # its core and memory given back
        # and the same ask fits now
        status, fits = _call(f"{server.url}/api/v1/services", tokens["admin_b"], "POST", too_big)
        assert status == 201, fits
        assert fits["holds"].startswith("cores 0,1")
