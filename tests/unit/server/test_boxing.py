"""What `phalanx server` does with submitted code (phalanx.server.boxing): boxes when it runs as
root with bubblewrap, else only admins may submit unless it is told to trust its submitters; the
policy it records is what every launch reads; a box's replica token writes its experiment only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

from phalanx.config import Settings
from phalanx.machine import box, identities
from phalanx.server import boxing
from phalanx.server.app import create_app
from phalanx.server.boxing import BoxMode, BoxPolicy
from phalanx.server.policy import Principal
from phalanx.server.settings import ServerSettings
from phalanx.store.base import Store
from phalanx.tokens import box_key, experiment_token


def test_a_root_server_with_bubblewrap_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(box, "missing_tools", lambda: [])
    policy = boxing.decide(trust=False, report_to="http://127.0.0.1:8000", uids=(200000, 200099))
    assert policy.mode is BoxMode.BOX and policy.report_to == "http://127.0.0.1:8000"
    line = boxing.start_line(policy)
    assert "boxed" in line and "uids 200000-200099" in line and "cgroup" in line


def test_a_server_that_cannot_box_lets_only_admins_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    policy = boxing.decide(trust=False, report_to="http://127.0.0.1:8000")
    assert policy.mode is BoxMode.ADMINS and "root" in policy.why
    assert "only server admins may submit" in boxing.start_line(policy)
    with pytest.raises(HTTPException) as refused:
        boxing.check_submitter(policy, Principal(user="ada"))
    assert refused.value.status_code == 403 and "--trust-submitters" in str(refused.value.detail)
    boxing.check_submitter(policy, Principal(user="root", superuser=True))  # an admin may
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(box, "missing_tools", lambda: ["bwrap"])
    assert "bwrap not found" in boxing.decide(trust=False, report_to="x").why


def test_trusting_submitters_is_said_loudly_and_checks_nobody() -> None:
    policy = boxing.decide(trust=True, report_to="http://127.0.0.1:8000")
    assert policy.mode is BoxMode.TRUST and boxing.start_line(policy).startswith("WARNING")
    boxing.check_submitter(policy, Principal(user="ada"))


def test_the_recorded_policy_is_what_launches_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(home=tmp_path)
    policy = BoxPolicy(BoxMode.BOX, "http://127.0.0.1:9", uids=(300000, 300009), hidden=(str(tmp_path),))
    assert boxing.isolation_for(settings, "nlp") is None  # no server recorded one: not boxed
    with boxing.recorded(tmp_path, policy):
        assert boxing.read_policy(tmp_path) == policy
        monkeypatch.setattr(identities, "_has_account", lambda uid: False)
        iso = boxing.isolation_for(settings, "nlp")
        assert iso is not None and (iso.uid, iso.gid, iso.account) == (300000, 300000, "phx-300000")
        assert iso.report_to == "http://127.0.0.1:9" and iso.hidden == (str(tmp_path),)
        assert boxing.isolation_for(settings, "vision").uid == 300001  # type: ignore[union-attr]
        assert boxing.isolation_for(settings, "nlp").uid == 300000  # type: ignore[union-attr]
    assert not (tmp_path / boxing.FILE).exists()
    with boxing.recorded(tmp_path, BoxPolicy(BoxMode.ADMINS, why="not root")):
        assert boxing.isolation_for(settings, "nlp") is None


def test_account_names_are_plain_or_hashed_never_shared() -> None:
    assert identities.account_name("nlp") == "phx-nlp"
    odd = [identities.account_name(p) for p in ("Vision", "vision.v2", "x" * 64, "1st", "vision")]
    assert len(set(odd)) == len(odd) and all(len(n) <= 32 and n[4].isalpha() for n in odd)
    for bad in ("100-", "10", "900-1000", "5000-4000", "a-b"):
        with pytest.raises(Exception, match="--box-uids"):
            identities.parse_range(bad)
    assert identities.parse_range("200000-265535") == (200000, 265535)


def test_a_range_that_is_used_up_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identities, "_has_account", lambda uid: uid == 5000)  # taken by a real account
    assert identities.ensure_account("a", (5000, 5001), tmp_path).uid == 5001
    with pytest.raises(Exception, match="used up"):
        identities.ensure_account("b", (5000, 5001), tmp_path)
    assert json.loads((tmp_path / "server" / "box-uids.json").read_text()) == {"a": 5001}


def test_a_box_token_writes_its_own_experiment_only(phalanx_home: Path, store: Store) -> None:
    for exp in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        store.create_experiment(experiment_id=exp, name=exp, project="default", replicas=[])
    policy = BoxPolicy(BoxMode.BOX, "http://127.0.0.1:9")
    settings = ServerSettings(
        store=Settings(home=phalanx_home), token="server-token", allowed_hosts=["testserver"], box=policy
    )
    mine = experiment_token(box_key(phalanx_home), "aaaaaaaaaaaa")
    with TestClient(create_app(settings, store)) as client:
        headers = {"Authorization": f"Bearer {mine}"}
        assert client.put(
            "/api/v1/experiments/aaaaaaaaaaaa/files/x.txt", content=b"1", headers=headers
        ).is_success
        assert (
            client.put(
                "/api/v1/experiments/bbbbbbbbbbbb/files/x.txt", content=b"1", headers=headers
            ).status_code
            == 403
        )
        assert client.get("/api/v1/experiments", headers=headers).status_code == 403
    unboxed = ServerSettings(
        store=Settings(home=phalanx_home), token="server-token", allowed_hosts=["testserver"]
    )
    with TestClient(create_app(unboxed, store)) as client:  # a server that does not box takes no box token
        assert (
            client.put(
                "/api/v1/experiments/aaaaaaaaaaaa/files/x.txt",
                content=b"1",
                headers={"Authorization": f"Bearer {mine}"},
            ).status_code
            == 401
        )
