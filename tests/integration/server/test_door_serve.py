"""`phalanx serve NAME@alias` from a laptop home after `phalanx login` serves the model of the
server's registry: a real `phalanx server` on loopback holds it, the serving process pulls the
version through the API with the login's token, answers with that version's output, and follows the
alias when `phalanx models alias` moves it on the server. The laptop's own store holds no model."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from tests.integration.server.serverproc import Server, start_server, stop_server
from tests.integration.server.test_remote_commands import TOKEN, ok, phalanx
from tests.integration.serving.serveproc import get_json, post, start_serve, stop_serve
from tests.support.onnx_models import random_linear, record_model, run_onnx

from phalanx.config import Settings
from phalanx.registry.checker import check_in_process
from phalanx.registry.service import Registry
from phalanx.store import open_store


@pytest.fixture
def server(phalanx_home: Path) -> Iterator[Server]:
    s = start_server(phalanx_home, token=TOKEN)
    try:
        yield s
    finally:
        stop_server(s.proc)


def test_serve_after_login_serves_and_follows_the_servers_model(server: Server, tmp_path: Path) -> None:
    store = open_store(Settings(home=server.home, db_url=None, artifacts_url=None))
    registry = Registry(store, check_in_process)
    models = {}
    for version in (1, 2):  # two versions on the server's machine, @prod on the first
        data = random_linear(version)
        exp = store.create_experiment(name=f"v{version}", project="p").id
        record_model(store, exp, "digits", data)
        assert registry.register(exp, "digits").version == version
        models[version] = data
    registry.set_alias("digits", "prod", 1)
    store.close()
    laptop = tmp_path / "laptop-home"
    ok(phalanx(laptop, "login", server.url, "--token", TOKEN))
    x = np.random.default_rng(7).normal(size=(3, 64)).astype(np.float32)
    body = json.dumps({"inputs": x.tolist()}).encode()

    served = start_serve(laptop, "digits@prod", "--poll-seconds", "0.1", "--track-seconds", "5")
    try:
        said = "".join(served.lines)
        assert f"phalanx: on server {server.url}\n" in said and "serving digits@prod (version 1," in said
        assert "no service experiment for a model of a server's registry" in said
        status, _, raw = post(served, "/v1/models/digits:predict", body)
        assert status == 200, raw
        doc = json.loads(raw)
        assert doc["version"] == 1
        assert np.allclose(doc["outputs"]["output"], run_onnx(models[1], x), rtol=0, atol=1e-5)

        # @prod moved on the server (from the laptop): the serving process follows it
        ok(phalanx(laptop, "models", "alias", "digits@prod", "2"))
        deadline = time.monotonic() + 120
        while get_json(served, "/healthz")["version"] != 2:
            assert time.monotonic() < deadline, "the move of @prod on the server was not followed in 120 s"
            time.sleep(0.1)
        status, _, raw = post(served, "/v1/models/digits:predict", body)
        assert status == 200 and json.loads(raw)["version"] == 2
        assert np.allclose(json.loads(raw)["outputs"]["output"], run_onnx(models[2], x), rtol=0, atol=1e-5)
    finally:
        stop_serve(served.proc)
    # this machine's registry (--local) has no such model: said, exit 2
    r = phalanx(laptop, "models", "get", "digits@prod", "--local")
    assert r.returncode == 2 and "Traceback" not in r.stderr
