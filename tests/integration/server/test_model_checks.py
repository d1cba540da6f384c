"""A server that does not box (not root, or `--trust-submitters`) still never parses an editor's ONNX
file in its own process: registering re-runs the model's check in a plain child process of its own
(phalanx.registry.parity_process.check_plain), in a session of its own, with none of the server's
environment, held to the server's deadline (``model_check_seconds``, the test seam that makes it
short here). A model that hangs onnxruntime or crashes it is refused with a 400 that says so, and the
server goes on answering (docs/security.md). A registration whose client goes away stops: its check's
process is killed, or it leaves the queue it waits in, and nothing is registered. The app is the real
one, in this process, with its real checker (tests/unit checks models in-process instead:
tests/unit/server/model_checks.py), behind a TestClient or served by uvicorn on a socket bound here
(``served``: a client that can go away)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

pytest.importorskip("onnxruntime")

from tests.support.onnx_models import random_linear, record_model, spinning_onnx

from phalanx.config import Settings
from phalanx.registry.parity_process import CHILD
from phalanx.registry.service import REGISTRY_ID
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store
from phalanx.store.base import Store

X = np.random.default_rng(1).normal(size=(2, 64)).astype(np.float32)  # record_model's example input
CANARY = "server-secret-5f0c9a"  # in the server's environment: never in the check's


@pytest.fixture
def store(phalanx_home: Path) -> Iterator[Store]:
    s = open_store(Settings(home=phalanx_home))
    yield s
    s.close()


def server(store: Store, phalanx_home: Path, check_seconds: float, check_slots: int = 2) -> TestClient:
    """The server's app over ``store`` (no box policy: it does not box), its model checks held to
    ``check_seconds``, ``check_slots`` of them at once."""
    settings = ServerSettings(
        store=Settings(home=phalanx_home),
        allowed_hosts=["testserver"],
        launch_workers=0,
        model_check_seconds=check_seconds,
        model_check_slots=check_slots,
    )
    return TestClient(create_app(settings, store))


@contextlib.contextmanager
def served(store: Store, phalanx_home: Path, check_seconds: float) -> Iterator[tuple[str, FastAPI]]:
    """The server's app (as ``server``, two check slots) served by uvicorn in a thread of this process
    on a loopback socket bound here: its URL and the app. Check processes left behind are killed."""
    settings = ServerSettings(
        store=Settings(home=phalanx_home),
        allowed_hosts=["127.0.0.1"],
        launch_workers=0,
        model_check_seconds=check_seconds,
        model_check_slots=2,
    )
    app = create_app(settings, store)
    listener = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    server_ = uvicorn.Server(config)
    serving = threading.Thread(target=server_.run, kwargs={"sockets": [listener]}, daemon=True)
    serving.start()
    try:
        wait_until("the server started", lambda: server_.started or not serving.is_alive())
        assert serving.is_alive(), "the server did not start"
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", app
    finally:
        for pid in check_processes():  # (a registration that did not stop: its check runs on)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        server_.should_exit = True
        serving.join(timeout=30)
        listener.close()


def wait_until(what: str, check: Callable[[], Any], seconds: float = 60) -> Any:
    """``check()``'s first true answer, polled; fails naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, f"not within {seconds:.0f} s: {what}"
        time.sleep(0.05)
    return found


def leaving_client(url: str, name: str, exp: str, model: str) -> http.client.HTTPConnection:
    """A registration sent on a connection of its own that the test closes (the client goes away:
    Ctrl-C, a dropped connection) instead of reading its answer."""
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=120)
    body = json.dumps({"experiment_id": exp, "model": model})
    connection.request("POST", f"/api/v1/models/{name}/versions", body, {"content-type": "application/json"})
    return connection


def experiment(store: Store, project: str = "p") -> str:
    """An experiment of ``project`` holding an ordinary model and one that onnxruntime runs without
    end, as an editor's job (or an upload through the ingest API) leaves them."""
    exp = store.create_experiment(name="hostile-model", project=project).id
    record_model(store, exp, "digits", random_linear(3))
    record_model(store, exp, "spin", spinning_onnx(), output=X)
    return exp


def register(client: TestClient, name: str, exp: str, model: str) -> tuple[int, Any]:
    r = client.post(f"/api/v1/models/{name}/versions", json={"experiment_id": exp, "model": model})
    return r.status_code, r.json()


def check_processes() -> list[int]:
    """This process's children that run the parity check (setpriv execs into the check itself)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if CHILD.encode() in argv and parent == os.getpid():
            found.append(int(entry.name))
    return found


@pytest.mark.timeout(300)
def test_a_model_that_hangs_its_check_is_refused_at_the_deadline_and_the_server_answers_on(
    store: Store, phalanx_home: Path
) -> None:
    exp = experiment(store)
    with server(store, phalanx_home, check_seconds=3) as client:
        status, refused = register(client, "spin", exp, "spin")
        assert status == 400, refused
        assert "spin.onnx: the parity check did not finish within 3 s" in refused["message"], refused
        assert "refusing to register it" in refused["message"]
        assert not check_processes()  # killed, not left spinning
        assert client.get("/api/v1/models").json() == []  # the server answers; nothing was registered
        assert client.get("/api/v1/models/spin").status_code == 404


@pytest.mark.timeout(300)
def test_a_check_runs_in_a_process_of_its_own_and_its_crash_is_a_clear_refusal(
    store: Store, phalanx_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CANARY)
    exp = experiment(store)
    with server(store, phalanx_home, check_seconds=300) as client:
        answers: list[tuple[int, Any]] = []
        waiting = threading.Thread(target=lambda: answers.append(register(client, "spin", exp, "spin")))
        waiting.start()
        deadline = time.monotonic() + 120
        while not (found := check_processes()):
            assert waiting.is_alive(), f"the registration ended with no check process of its own: {answers}"
            assert time.monotonic() < deadline, "no parity check process appeared: it ran in the server's"
            time.sleep(0.1)
        [pid] = found
        # a session of its own, an environment with nothing of the server's
        assert os.getsid(pid) == pid != os.getsid(0)
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        for leak in (CANARY, "PHALANX_HOME=", str(phalanx_home)):
            assert leak not in environ, leak
        # the server answers while the check runs
        assert client.get("/api/v1/models").status_code == 200

        # onnxruntime crashes in it (a native fault): the editor gets a refusal that says so
        os.kill(pid, signal.SIGSEGV)
        waiting.join(timeout=120)
        [(status, refused)] = answers
        assert status == 400, refused
        said = "spin.onnx: the parity check's process ended without an answer (killed by SIGSEGV"
        assert said in refused["message"], refused
        assert not check_processes()

        # and the server goes on: it answers, and checks and registers an ordinary model
        assert client.get("/api/v1/models/spin").status_code == 404
        status, created = register(client, "digits", exp, "digits")
        assert status == 201, created
        assert created["lineage"]["parity"]["passed"] is True, created
        assert created["signature"]["inputs"] == [{"name": "input", "dtype": "float32", "shape": [None, 64]}]


async def _request_threads(count: int) -> None:
    """The app's request threads (anyio's default limiter: 40 on a real server) cut to ``count``."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = count


def burst(client: TestClient, registrations: list[tuple[str, str]]) -> list[tuple[int, Any]]:
    """Register each (name, experiment)'s hanging model at once, in threads of their own: the
    answers as they come."""
    answers: list[tuple[int, Any]] = []
    for name, exp in registrations:
        send = threading.Thread(
            target=lambda n=name, e=exp: answers.append(register(client, n, e, "spin")), daemon=True
        )
        send.start()
    deadline = time.monotonic() + 120
    while not check_processes():
        assert time.monotonic() < deadline, f"no check process appeared: {answers}"
        time.sleep(0.1)
    return answers


def kill_checks_until(answers: list[tuple[int, Any]], count: int) -> int:
    """Kill each check process as it appears until ``count`` registrations were answered (each then
    refused): the most check processes seen at once."""
    most = 0
    while len(answers) < count:
        found = check_processes()
        most = max(most, len(found))
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    assert [status for status, _ in answers] == [400] * count, answers
    assert all("killed by SIGKILL" in refused["message"] for _, refused in answers), answers
    return most


@pytest.mark.timeout(300)
def test_a_burst_of_registrations_checks_a_slot_at_a_time_and_the_server_answers_meanwhile(
    store: Store, phalanx_home: Path
) -> None:
    # registrations of models that hang their check: each check is a process that may take GiBs for
    # minutes, and each request used to hold one of the server's request threads for as long (40 of
    # them stopped every route, /health included). Here the server has 3, and one check slot
    p, q = experiment(store, "p"), experiment(store, "q")
    with server(store, phalanx_home, check_seconds=120, check_slots=1) as client:
        client.portal.call(_request_threads, 3)  # (the portal: the app's event loop)
        answers = burst(client, [("p1", p), ("p2", p), ("q1", q), ("q2", q)])
        # the server answers while every registration still waits for its check
        listed: list[int] = []
        lister = threading.Thread(
            target=lambda: listed.append(client.get("/api/v1/models").status_code), daemon=True
        )
        lister.start()
        lister.join(timeout=60)
        assert listed == [200], "the server stopped answering while registrations checked their models"
        assert answers == []
        assert kill_checks_until(answers, 4) == 1  # one check process at a time: the slot's


@pytest.mark.timeout(300)
def test_one_projects_burst_of_registrations_does_not_hold_another_projects(
    store: Store, phalanx_home: Path
) -> None:
    p, q = experiment(store, "p"), experiment(store, "q")
    with server(store, phalanx_home, check_seconds=120, check_slots=2) as client:
        answers = burst(client, [("p1", p), ("p2", p)])
        # p's registrations take their turns one at a time: q's is checked in the other slot at once
        status, created = register(client, "digits", q, "digits")
        assert status == 201, created
        # a third of p's at once is refused at once: it would wait two checks, past what a client waits
        status, refused = register(client, "p3", p, "spin")
        assert status == 429 and "already has 2 model registrations being checked" in refused["message"]
        assert answers == []  # p's two still wait (one checking, one for its turn)
        assert kill_checks_until(answers, 2) == 1
        status, created = register(client, "digits", p, "digits")  # p's turn is free again
        assert status == 201, created


def registry_files(store: Store) -> list[str]:
    """The files under the artifact store's registry folder (its copies of registered models)."""
    assert store.artifact_store is not None
    return store.artifact_store.list(REGISTRY_ID)


@pytest.mark.timeout(300)
def test_a_client_that_goes_away_stops_its_check_and_frees_its_projects_turn(
    store: Store, phalanx_home: Path
) -> None:
    # its check hangs for as long as the server lets it (10 minutes here): the client gives up
    exp = experiment(store)
    with served(store, phalanx_home, check_seconds=600) as (url, _app):
        leaving = leaving_client(url, "spin", exp, "spin")
        [pid] = wait_until("the registration's check process started", check_processes, 120)
        leaving.close()
        # killed and reaped (not after its 10 minutes)
        wait_until(
            "its check's process ended once its client went away", lambda: not Path(f"/proc/{pid}").exists()
        )
        assert not check_processes()
        with httpx.Client(base_url=url, timeout=120) as client:
            assert client.get("/api/v1/models/spin").status_code == 404  # nothing was registered
            assert registry_files(store) == []
            # the project's turn and the slot are free at once: not after the hanging check's 10 minutes
            r = client.post("/api/v1/models/digits/versions", json={"experiment_id": exp, "model": "digits"})
            assert r.status_code == 201, r.text
            assert r.json()["lineage"]["parity"]["passed"] is True


@pytest.mark.timeout(300)
def test_a_client_that_goes_away_while_its_registration_waits_for_its_turn_never_runs_its_check(
    store: Store, phalanx_home: Path
) -> None:
    exp = experiment(store)
    with served(store, phalanx_home, check_seconds=600) as (url, app):
        held: dict[str, int] = app.state.model_checks_held  # the project's registrations in the server
        answers: list[httpx.Response] = []

        def first() -> None:
            with httpx.Client(base_url=url, timeout=300) as client:
                answers.append(
                    client.post("/api/v1/models/spin1/versions", json={"experiment_id": exp, "model": "spin"})
                )

        checking = threading.Thread(target=first, daemon=True)
        checking.start()
        [pid] = wait_until("the first registration's check process started", check_processes, 120)
        leaving = leaving_client(url, "spin2", exp, "spin")
        wait_until("the second registration waits for its turn", lambda: held.get("p") == 2)
        leaving.close()
        wait_until("the registration whose client went away left the queue", lambda: held.get("p") == 1)

        os.kill(pid, signal.SIGKILL)  # the first one's check ends: its turn would pass to the second
        checking.join(timeout=120)
        [refused] = answers
        assert refused.status_code == 400 and "killed by SIGKILL" in refused.text, refused.text
        assert held.get("p") == 0 and not check_processes()  # the second is gone: no check of its ran
        with httpx.Client(base_url=url, timeout=120) as client:
            assert client.get("/api/v1/models/spin2").status_code == 404
        assert registry_files(store) == []
