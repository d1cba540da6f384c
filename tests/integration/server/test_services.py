"""TensorBoard as a service on a real `phalanx server` (docs/services.md): a group's board started by
a project's viewer answers through ``/services/ID/`` (TensorBoard's own data API: both trials'
runs, their points) to that project's members only, is handed back when asked again, is listed and
stopped from the CLI, and nothing of it outlives the server. A board nobody reaches stops by itself
(``Services`` in this process, with a real TensorBoard process)."""

from __future__ import annotations

import io
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from tests.integration.server.serverproc import running_server, stop_server, wait_for
from tests.integration.server.test_remote_commands import ok, phalanx
from tests.unit.server import fill
from tests.unit.server.teams_fixtures import make_group, make_team
from tests.unit.services.test_boards import report

from phalanx.config import Settings
from phalanx.domain import Trial, TrialState
from phalanx.server.service_spawn import MARK
from phalanx.server.services import Services, Timing
from phalanx.services.boards import run_name
from phalanx.services.targets import Target
from phalanx.store import open_store

pytestmark = pytest.mark.slow


def _call(url: str, token: str | None, method: str = "GET", doc: Any = None) -> tuple[int, Any]:
    body = None if doc is None else json.dumps(doc).encode()
    request = urllib.request.Request(url, data=body, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            raw = answer.read()
            kind = answer.headers.get("content-type", "")
            return answer.status, json.loads(raw) if "json" in kind else raw
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """A browser's first answer, not where it is sent on (a redirect is not followed)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _unsigned(url: str) -> tuple[int, str | None]:
    """(status, Location) of a GET without credentials, redirects not followed (a browser's first)."""
    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=60) as answer:
            return answer.status, answer.headers.get("location")
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers.get("location")


def service_processes(home: Path, service_id: str) -> list[int]:
    """The processes of service ``service_id`` of the server over ``home`` (its box's included):
    those marked with its folder (phalanx.server.service_spawn.MARK)."""
    mark = f"{MARK}={home / 'services' / service_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in environ:
            found.append(int(entry.name))
    return found


def test_a_groups_tensorboard_answers_its_projects_members_through_the_server_only(tmp_path: Path) -> None:
    home = tmp_path / "server-home"
    store = open_store(Settings(home=home))
    tokens = make_team(store).tokens
    group = make_group(store, "A")
    trials = []
    for number, losses in enumerate(([0.9, 0.5, 0.3], [0.8, 0.2, 0.1])):
        e = fill.experiment(store, name=f"trial-{number}", project="A")
        store.add_trial(Trial(group.id, number, e.id, {"x": number}, TrialState.DONE))
        store.link_experiment(e.id, group.id)
        fill.scalars(store, e.id, "loss", "loss", losses)
        trials.append(e)
    picture = io.BytesIO()
    Image.new("RGB", (4, 2), (0, 128, 255)).save(picture, format="PNG")
    report(store, trials[1].id, "image", "inputs", 3, picture.getvalue())  # the Logger's report_image
    report(store, trials[1].id, "histogram", "weights", 3, json.dumps({"values": [[2], [5]]}).encode())
    store.close()
    laptop = tmp_path / "laptop"
    with running_server(home) as server:
        api = f"{server.url}/api/v1"
        status, started = _call(f"{api}/services", tokens["viewer_a"], "POST", {"group": group.id[:8]})
        assert status == 201, started
        assert started["started"] and started["target"] == {"kind": "group", "id": group.id}
        board = f"{server.url}{started['path']}"
        assert started["path"] == f"/services/{started['id']}/"
        status, again = _call(f"{api}/services", tokens["editor_a"], "POST", {"group": group.id})
        assert (status, again["id"], again["started"]) == (200, started["id"], False)

        # TensorBoard's own data API, through the proxy, as the project's viewer
        runs = wait_for(
            "TensorBoard lists both trials",
            lambda: (
                (r := _call(f"{board}data/runs", tokens["viewer_a"]))[0] == 200 and len(r[1]) == 2 and r[1]
            ),
            120,
        )
        assert sorted(runs) == sorted(run_name(e) for e in trials)
        status, points = _call(
            f"{board}data/plugin/scalars/scalars?run={run_name(trials[1])}&tag=loss", tokens["viewer_a"]
        )
        assert status == 200
        assert [(step, round(value, 6)) for _, step, value in points] == [(0, 0.8), (1, 0.2), (2, 0.1)]
        status, page = _call(board, tokens["viewer_a"])
        assert status == 200 and b"tensorboard" in page.lower()
        # its image and histogram, as TensorBoard's own Images and Histograms tabs read them
        second = run_name(trials[1])
        status, images = _call(
            f"{board}data/plugin/images/images?run={second}&tag=inputs", tokens["viewer_a"]
        )
        assert status == 200 and [i["step"] for i in images] == [3], images
        status, pixels = _call(
            f"{board}data/plugin/images/individualImage?{images[0]['query']}", tokens["viewer_a"]
        )
        assert status == 200 and pixels == picture.getvalue()
        status, bars = _call(
            f"{board}data/plugin/histograms/histograms?run={second}&tag=weights", tokens["viewer_a"]
        )
        assert status == 200 and [(step, buckets) for _, step, buckets in bars] == [
            (3, [[0, 1, 2], [1, 2, 5]])
        ]

        # nobody outside project A learns it exists; nobody unsigned reaches it
        for outsider in ("none", "admin_b"):
            assert _call(f"{board}data/runs", tokens[outsider])[0] == 404
            assert _call(f"{api}/services/{started['id']}", tokens[outsider])[0] == 404
            assert _call(f"{api}/services", tokens[outsider], "POST", {"group": group.id})[0] == 404
            assert _call(f"{api}/services", tokens[outsider])[1] == []
        assert (
            _call(f"{board}data/runs", None)[0] in (401, 303, 200)
            and _call(f"{api}/services", None)[0] == 401
        )

        # the CLI from a laptop: its list, then stop
        listed = ok(phalanx(laptop, "tensorboard", "ls", "--server", server.url, token=tokens["viewer_a"]))
        assert started["id"] in listed.stdout and f"group {group.id}" in listed.stdout
        assert service_processes(home, started["id"])
        ok(
            phalanx(
                laptop, "tensorboard", "stop", started["id"], "--server", server.url, token=tokens["viewer_a"]
            )
        )
        assert not service_processes(home, started["id"])
        assert _call(f"{board}data/runs", tokens["viewer_a"])[0] == 404

        # started again from the CLI with Polyaxon's `kind: tensorboard` file of project A, then the
        # server stops: its board stops with it
        board_file = laptop / "tensorboard.yml"
        board_file.write_text(
            "version: 1\nkind: tensorboard\nproject: A\nbuild:\n  image: tensorflow/tensorflow\n"
        )
        again_cli = ok(
            phalanx(
                laptop,
                "tensorboard",
                "start",
                "-f",
                str(board_file),
                "-o",
                "json",
                "--server",
                server.url,
                token=tokens["viewer_a"],
            )
        )
        second = json.loads(again_cli.stdout)
        assert second["target"] == {"kind": "project", "id": "A"}
        assert "build: accepted for Polyaxon compatibility and ignored" in again_cli.stderr
        assert second["url"] == f"{server.url}/services/{second['id']}/"
        assert service_processes(home, second["id"])
        stop_server(server.proc)
        assert not service_processes(home, second["id"])
        assert not list((home / "services").iterdir())


def test_a_board_nobody_reaches_is_stopped(tmp_path: Path) -> None:
    store = open_store(Settings(home=tmp_path / "home"))
    e = fill.experiment(store, name="lonely")
    fill.scalars(store, e.id, "loss", "loss", [1.0])
    services = Services(
        store, tmp_path / "home", lambda _: None, Timing(idle_seconds=1.0, refresh_seconds=0.1)
    )
    services.start()
    try:
        service, started = services.tensorboard(e.project, Target("experiment", e.id), "someone")
        [board] = service.instances
        assert started and board.process.alive() and board.socket.exists()

        # off the list first, then its process ended and its folders removed: all of it, in the end
        def stopped() -> bool:
            gone = not board.socket.parent.exists() and not service.folder.exists()
            return not services.listed() and not board.process.alive() and gone

        wait_for("the idle board stopped, its process and folders gone", stopped, 120)
        fresh, started = services.tensorboard(e.project, Target("experiment", e.id), "someone")
        assert started and fresh.id != service.id  # asked again: a new one
    finally:
        services.close()
    assert not fresh.alive()
    assert not os.path.exists(fresh.instances[0].socket)
