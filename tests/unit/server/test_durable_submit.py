"""POST /api/v1/experiments: durable on answer, keys per user with a fingerprint, admission at submit.

The app here has no launcher (tests/unit starts no process): what a submit writes before its answer
is checked; starting it is tests/integration/server/test_control_plane.py's, on a real server."""

from __future__ import annotations

import gzip
import io
import tarfile
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from phalanx.domain import ExperimentStatus
from phalanx.errors import UsageError
from phalanx.server.app import create_app
from phalanx.server.orders import read as read_order
from phalanx.server.routes import submit as submit_route
from phalanx.server.settings import ServerSettings
from phalanx.server.submitting import SubmitResult
from phalanx.share import Limit, Quota
from phalanx.store import quotas
from phalanx.store.base import LocalStore
from phalanx.store.submissions import SubmissionState
from tests.unit.server.teams_fixtures import Team, make_team

EXP = "version: 1\nkind: experiment\nproject: A\nrun:\n  cmd: python train.py\n"


def bundle(files: dict[str, str] | None = None) -> bytes:
    """The same bytes for the same files (as `phalanx run --server` packs them): a retry resends them."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, text in (files or {"train.py": "print('hi')\n"}).items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def submit(
    client: TestClient, token: str | None = None, text: str = EXP, key: str | None = None, **fields: str
) -> tuple[int, dict[str, object]]:
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if key:
        headers["Idempotency-Key"] = key
    r = client.post(
        "/api/v1/experiments",
        data={"file_name": "exp.yml", "file_text": text, **fields},
        files={"bundle": ("code.tar.gz", bundle(), "application/gzip")},
        headers=headers,
    )
    return r.status_code, r.json()


@pytest.fixture
def team(store: LocalStore) -> Team:
    return make_team(store)


def test_an_answered_submit_is_written_whole_before_the_answer(
    client: TestClient, store: LocalStore, team: Team, settings: ServerSettings
) -> None:
    status, body = submit(client, team.tokens["editor_a"], key="nightly")
    assert status == 201, body
    exp_id = str(body["id"])
    exp = store.get_experiment(exp_id)
    # the experiment exists at once, waiting for the launcher: its replicas, its file, its project
    assert exp.status is ExperimentStatus.CREATED
    assert exp.project == "A" and exp.spec_text == EXP
    assert [r.name for r in store.list_replicas(exp_id)] == ["master"]
    sub = store.submission(exp_id)
    assert sub is not None and sub.state is SubmissionState.ACCEPTED
    assert sub.user == "editor_a" and sub.key == "nightly" and sub.bundle_sha256 == body["bundle_sha256"]
    # who launched it and the audit trail, written in the same transaction
    assert team.accounts.launched_by("experiment", exp_id) == "editor_a"
    trail = [(e.actor, e.action, e.target) for e in team.accounts.audit_trail()]
    assert ("editor_a", "experiment.submit", exp_id) in trail
    # what the launcher needs, on disk: the validated file, where its code goes, its launch
    order = read_order(settings.store, exp_id)
    assert order is not None and order.launch is not None
    assert order.file_text == EXP and order.launch.options.accepted
    assert (settings.store.home / "server" / "bundles" / f"{body['bundle_sha256']}.tar.gz").exists()


def test_a_replay_answers_the_first_experiment_and_another_request_with_the_key_is_409(
    client: TestClient, store: LocalStore, team: Team
) -> None:
    token = team.tokens["editor_a"]
    first, a = submit(client, token, key="k1")
    again, b = submit(client, token, key="k1")
    assert (first, again) == (201, 200)
    assert b["id"] == a["id"] and b["created"] is False
    status, body = submit(client, token, key="k1", text=EXP + "# another file\n")
    assert status == 409 and "Idempotency-Key 'k1' was used for another request" in str(body["message"])
    status, body = submit(client, token, key="k1", priority="5")
    assert status == 409
    assert store.list_experiments().total == 1


def test_a_key_is_per_user_and_authorization_comes_before_any_replay(
    client: TestClient, store: LocalStore, team: Team
) -> None:
    status, mine = submit(client, team.tokens["editor_a"], key="nightly")
    assert status == 201
    # another user's key is no key of theirs: the admin of A gets an experiment of their own
    status, theirs = submit(client, team.tokens["admin_a"], key="nightly")
    assert status == 201 and theirs["id"] != mine["id"]
    # somebody without a role in A replaying the key learns nothing (no id, no digest)
    for who in ("none", "admin_b"):
        status, body = submit(client, team.tokens[who], key="nightly")
        assert status == 404, body
        assert mine["id"] not in str(body) and str(mine["bundle_sha256"]) not in str(body)
    # a viewer may not submit, key or not
    status, body = submit(client, team.tokens["viewer_a"], key="nightly")
    assert status == 403 and mine["id"] not in str(body)
    assert store.list_experiments().total == 2


def test_a_key_expires(
    client: TestClient, store: LocalStore, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phalanx.server import submitting

    real = submitting.time.time
    status, first = submit(client, team.tokens["editor_a"], key="weekly")
    monkeypatch.setattr(submitting.time, "time", lambda: real() + 8 * 24 * 3600)  # a week and a day later
    status, second = submit(client, team.tokens["editor_a"], key="weekly")
    assert status == 201 and second["id"] != first["id"]
    old = store.submission(str(first["id"]))
    assert old is not None and old.key is None  # the old submit keeps its row, not its key


def test_an_experiment_bigger_than_its_projects_whole_quota_is_refused_at_submit(
    client: TestClient, store: LocalStore, team: Team, phalanx_home: Path
) -> None:
    quotas.put(store, Quota("A", "local", Limit(cores=1)))
    two = EXP.replace("run:", "environment:\n  resources:\n    cpu: {requests: 2, limits: 2}\nrun:")
    status, body = submit(client, team.tokens["editor_a"], text=two)
    assert status == 400, body
    message = str(body["message"])
    assert "needs 2 cores, more than project A's quota on local (1)" in message
    assert "phalanx quota set A" in message
    assert store.list_experiments().total == 0
    orders = phalanx_home / "server" / "orders"
    assert not orders.exists() or not any(orders.iterdir())  # nothing half-written


def test_an_experiment_bigger_than_this_machine_is_refused_at_submit(
    client: TestClient, store: LocalStore, team: Team
) -> None:
    huge = EXP.replace("run:", "environment:\n  resources:\n    cpu: {requests: 4096, limits: 4096}\nrun:")
    status, body = submit(client, team.tokens["editor_a"], text=huge)
    assert status == 400, body
    assert "the experiment needs 4096 cores" in str(body["message"]) and "on this machine" in str(
        body["message"]
    )
    assert "--oversubscribe" not in str(body["message"])  # not an option a server submit has
    assert store.list_experiments().total == 0


def test_a_destructive_stop_needs_eight_characters(client: TestClient, store: LocalStore, team: Team) -> None:
    _, body = submit(client, team.tokens["editor_a"])
    exp_id = str(body["id"])
    auth = {"Authorization": f"Bearer {team.tokens['editor_a']}"}
    r = client.post(f"/api/v1/experiments/{exp_id[:1]}/stop", headers=auth)
    assert r.status_code == 400 and "at least 8 characters" in r.json()["message"]
    assert store.get_experiment(exp_id).status is ExperimentStatus.CREATED
    r = client.post(f"/api/v1/experiments/{exp_id[:8]}/stop", headers=auth)
    assert r.status_code == 200, r.text
    assert store.get_experiment(exp_id).status is ExperimentStatus.STOPPED


def test_a_submit_with_no_launcher_stays_accepted_until_one_runs(
    settings: ServerSettings, store: LocalStore, team: Team
) -> None:
    """The server answers at once and never starts work in the request: with launch_workers 0 the
    experiment waits, created, with its submission accepted (a server with workers starts it)."""
    with TestClient(create_app(settings, store)) as client:
        status, body = submit(client, team.tokens["editor_a"])
    assert status == 201
    assert store.get_experiment(str(body["id"])).status is ExperimentStatus.CREATED
    assert [s.id for s in store.submissions(SubmissionState.ACCEPTED)] == [body["id"]]


def test_a_burst_of_submits_waits_for_a_slot_without_holding_the_lists_threads(
    settings: ServerSettings, store: LocalStore, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More submits at once than the server has request threads (40): they wait for a submit slot,
    so a list asked meanwhile is answered (before, each held a thread and the list waited)."""
    release = threading.Event()
    entered = threading.Semaphore(0)

    def held(*args: object) -> SubmitResult:
        entered.release()
        release.wait(60)
        raise UsageError("released")

    monkeypatch.setattr(submit_route, "submit", held)
    token = team.tokens["editor_a"]
    with TestClient(create_app(settings.model_copy(update={"submit_slots": 1}), store)) as client:
        burst = [threading.Thread(target=submit, args=(client, token)) for _ in range(45)]
        for t in burst:
            t.start()
        try:
            assert entered.acquire(timeout=60)  # one submit holds the only slot; 44 wait for it
            answers: list[int] = []
            auth = {"Authorization": f"Bearer {token}"}
            lister = threading.Thread(
                target=lambda: answers.append(client.get("/api/v1/experiments", headers=auth).status_code)
            )
            lister.start()
            lister.join(60)
            assert answers == [200]
            assert not entered.acquire(timeout=0.2)  # still one inside: the others waited for the slot
        finally:
            release.set()
            for t in burst:
                t.join(60)
