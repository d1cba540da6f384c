"""Property-based fuzzing of the whole API from its own OpenAPI document: whatever schemathesis
sends (at most 25 examples per operation), the server never answers with a 5xx.

The app is built when the module is collected (schemathesis parametrizes from a schema object, and
its fixture-based loader does not work with this pytest), over a store in a temp dir removed at exit.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from tests.unit.server import fill

from phalanx.config import Settings
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
REAL: dict[str, str] = {}  # the id of the experiment the store holds, once the app is built


def _app() -> FastAPI:
    home = Path(tempfile.mkdtemp(prefix="phalanx-fuzz-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    store_settings = Settings(home=home)
    store = open_store(store_settings)
    e = fill.experiment(store, name="fuzzed", n_workers=2)
    fill.scalars(store, e.id, "loss", "worker 00", [1.0, 0.5, 0.25])
    fill.log_lines(store, e.id, "worker-0", ["hello"])
    fill.param(store, e.id, "Args", "lr", 0.1)
    REAL["id"] = e.id
    return create_app(
        ServerSettings(store=store_settings, token=TOKEN, poll_seconds=0.01, allowed_hosts=["*"]), store
    )


schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", _app(), headers=AUTH)


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_makes_the_server_fail(case: schemathesis.Case) -> None:
    # Reads and uploads go to the one real experiment, so its metrics, logs, artifacts and files
    # are fuzzed too (random ids would only ever meet 404); stop and delete keep random ids.
    real = case.method in ("GET", "PUT") or case.path.endswith("/attempts/next")  # a pod's start
    if real and case.path_parameters and "experiment_id" in case.path_parameters:
        case.path_parameters["experiment_id"] = REAL["id"]
    case.call_and_validate(headers=AUTH, checks=[not_a_server_error])


TEAM: dict[str, str] = {}  # role -> personal token, and "id": the real experiment of project A


def _team_app() -> FastAPI:
    """The same API on a team server (docs/teams.md): fuzzed as each role of project A's members,
    an admin of another project and a user in no project."""
    from tests.unit.server.teams_fixtures import make_team

    home = Path(tempfile.mkdtemp(prefix="phalanx-fuzz-team-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    store_settings = Settings(home=home)
    store = open_store(store_settings)
    e = fill.experiment(store, name="fuzzed", project="A", n_workers=1)
    fill.scalars(store, e.id, "loss", "worker 00", [1.0, 0.5])
    TEAM.update(make_team(store).tokens, id=e.id)
    return create_app(ServerSettings(store=store_settings, poll_seconds=0.01, allowed_hosts=["*"]), store)


_TEAM_APP = _team_app()
team_schema = schemathesis.openapi.from_asgi(
    "/api/v1/openapi.json", _TEAM_APP, headers={"Authorization": f"Bearer {TEAM['root']}"}
)


@pytest.mark.slow
@team_schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_of_any_role_makes_a_team_server_fail(case: schemathesis.Case) -> None:
    real = case.method in ("GET", "PUT") or case.path.endswith("/attempts/next")
    if real and case.path_parameters and "experiment_id" in case.path_parameters:
        case.path_parameters["experiment_id"] = TEAM["id"]
    if case.path_parameters and "project" in case.path_parameters:
        case.path_parameters["project"] = "A"
    for role in ("none", "viewer_a", "editor_a", "admin_b"):
        case.call_and_validate(headers={"Authorization": f"Bearer {TEAM[role]}"}, checks=[not_a_server_error])
