"""A registered model served by a real `phalanx server` as a service (docs/services.md): submitted by
a project editor with `phalanx serve NAME@prod --on-server` (a viewer may not), it answers predict
requests through ``/services/ID/`` to the project's members only, survives a SIGKILL of its process
(started again by the server), follows its alias to the version it is moved to, is served again
by the next server after a restart, and is stopped from the API, leaving no process."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest
from tests.integration.server.serverproc import running_server, wait_for
from tests.integration.server.test_remote_commands import ok, phalanx
from tests.integration.server.test_services import _call, service_processes
from tests.support.onnx_models import random_linear, record_model, run_onnx
from tests.unit.server.teams_fixtures import make_team

from phalanx.config import Settings
from phalanx.machine.ledger import Ledger, ledger_path
from phalanx.registry.checker import check_in_process
from phalanx.registry.service import Registry
from phalanx.store import open_store

pytestmark = pytest.mark.slow

X = np.random.default_rng(7).normal(size=(3, 64)).astype(np.float32)


def _serving_pids(home: Path, service_id: str) -> set[int]:
    """The serving processes themselves (python -m phalanx.serving.folder, inside their boxes)."""
    found = set()
    for pid in service_processes(home, service_id):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"phalanx.serving.folder" in argv and not argv[0].endswith((b"bwrap", b"setpriv")):
            found.add(pid)
    return found


def _dead(pid: int) -> bool:
    """Whether ``pid`` has ended (gone, or a zombie its parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _answered(metrics: bytes) -> float:
    """The predict requests one serving process answered, as its /metrics says."""
    lines = metrics.decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith("phalanx_serve_requests_total{"))


def test_a_model_served_on_the_server_survives_a_kill_follows_its_alias_and_stops(tmp_path: Path) -> None:
    home = tmp_path / "server-home"
    store = open_store(Settings(home=home))
    tokens = make_team(store).tokens
    registry = Registry(store, check_in_process)
    outputs = {}
    for version in (1, 2):
        data = random_linear(version)
        exp = store.create_experiment(name=f"v{version}", project="A").id
        record_model(store, exp, "digits", data)
        registry.register(exp, "digits")
        outputs[version] = run_onnx(data, X)
    registry.set_alias("digits", "prod", 1)
    store.close()
    laptop = tmp_path / "laptop"
    with running_server(home, cpus=[0, 1]) as server:  # a machine of 2 cores
        api = f"{server.url}/api/v1"
        assert (
            _call(f"{api}/services", tokens["viewer_a"], "POST", {"kind": "model", "model": "digits@prod"})[0]
            == 403
        )
        said = ok(
            phalanx(
                laptop,
                "serve",
                "digits@prod",
                "--on-server",
                "--replicas",
                "2",
                "--cpu",
                "1",
                "--memory",
                "300Mi",
                "--server",
                server.url,
                token=tokens["editor_a"],
            )
        ).stdout
        found = re.search(r"service ([0-9a-f]{12})\): POST (\S+)", said)
        assert found, said
        service_id, predict = found.groups()
        assert predict == f"{server.url}/services/{service_id}/v1/models/digits:predict"

        def version_served(token: str = tokens["viewer_a"]) -> int | None:
            status, doc = _call(predict, token, "POST", {"inputs": X.tolist()})
            if status != 200:
                return None
            out = np.asarray(doc["outputs"]["output"], dtype=np.float32)
            assert np.allclose(out, outputs[doc["version"]], atol=1e-5)
            return int(doc["version"])

        assert "2 replicas" in said
        # each replica's core and memory from the machine's ledger, held together while it serves
        assert "its replicas hold cores 0,1, 600Mi (capped) of the server's machine together" in said
        assert _held(home) == [(f"model-{service_id}", (0, 1), 600.0)]
        assert [version_served() for _ in range(10)] == [1] * 10  # a project viewer predicts
        assert _call(predict, tokens["admin_b"], "POST", {"inputs": X.tolist()})[0] == 404
        # the two processes took turns: each one's own /metrics (asked in turn too) counts half
        metrics = f"{server.url}/services/{service_id}/metrics"
        counted = sorted(_answered(_call(metrics, tokens["viewer_a"])[1]) for _ in range(2))
        assert counted == [5.0, 5.0], counted

        first, other = sorted(_serving_pids(home, service_id))
        os.kill(first, signal.SIGKILL)
        wait_for("the killed one is dead", lambda: _dead(first), 60)
        # the other one answers every request meanwhile: none fails while the first is started again
        # (a request the dead one's socket still queued while its last threads ended included)
        assert [version_served() for _ in range(6)] == [1] * 6
        status = f"{api}/services/{service_id}"
        wait_for(
            "the server started it again", lambda: _call(status, tokens["viewer_a"])[1]["restarts"] == 1, 120
        )
        now = _serving_pids(home, service_id)
        assert len(now) == 2 and other in now and first not in now
        assert _call(status, tokens["viewer_a"])[1]["replicas"] == 2
        assert [version_served() for _ in range(4)] == [1] * 4

        ok(
            phalanx(
                laptop,
                "models",
                "alias",
                "digits@prod",
                "2",
                "--server",
                server.url,
                token=tokens["editor_a"],
            )
        )
        wait_for("it follows prod to version 2", lambda: version_served() == 2, 120)

    # an answered serve outlives the server: the next one serves it again, at the same path, holding
    # what it held
    with running_server(home, cpus=[0, 1]) as server:
        api = f"{server.url}/api/v1"
        predict = f"{server.url}/services/{service_id}/v1/models/digits:predict"  # version_served's now
        assert version_served() == 2
        assert _call(f"{api}/services/{service_id}", tokens["viewer_a"])[1]["started_by"] == "editor_a"
        assert _held(home) == [(f"model-{service_id}", (0, 1), 600.0)]

        stop = f"{api}/services/{service_id}"
        assert _call(stop, tokens["viewer_a"], "DELETE")[0] == 403  # its editors stop it
        assert _call(f"{api}/services/{service_id}", tokens["editor_a"], "DELETE")[0] == 200
        assert not service_processes(home, service_id)
        assert _held(home) == []  # given back with its stop
        assert _call(predict, tokens["viewer_a"], "POST", {"inputs": X.tolist()})[0] == 404
        listed = json.loads(
            ok(
                phalanx(
                    laptop,
                    "tensorboard",
                    "ls",
                    "-o",
                    "json",
                    "--server",
                    server.url,
                    token=tokens["viewer_a"],
                )
            ).stdout
        )
        assert listed == []


def _held(home: Path) -> list[tuple[str, tuple[int, ...], float]]:
    """What the server's machine's ledger holds: (entry, cores, MiB) each."""
    holding, _, _ = Ledger(ledger_path(home)).snapshot()
    return [(e.experiment_id, e.cpus, e.need.memory_mib) for e in holding]
