"""A boxed experiment on the local engine, before anything starts: its dry run says what each unit's
box is, the environment is the box's own (never the supervisor's), the tracking wiring reports over
HTTP without the server's home, and the reaper is handed the secrets' names, never their values.
Plus what root does with the folders a box wrote: a snapshot stores a planted link as a link, and a
venv build's files are written over a planted link, never through it."""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from phalanx import buildenv, repro
from phalanx.backends.local import boxes
from phalanx.backends.local.engine import LocalBackend
from phalanx.config import Settings
from phalanx.machine.box import ENV_BOX, Isolation, box_folder, write_new
from phalanx.supervisor.preparing import tracking_env
from phalanx.tokens import box_key, experiment_token
from tests.unit.backends.conftest import EXPERIMENT_ID, context, plan

ISO = Isolation("phx-nlp", 61000, 61000, "nlp", "http://127.0.0.1:8123")


def test_a_boxed_dry_run_names_each_units_box_and_its_whole_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the server's")
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path))
    settings = Settings(home=tmp_path)
    ctx = replace(context(PHALANX_TOKEN="phx-exp.x.y"), isolation=ISO)
    dry = LocalBackend(settings).dry_run(plan(workers=1), ctx)
    own = box_folder(tmp_path, EXPERIMENT_ID)
    for unit in dry.units:
        assert "--reuid=61000" in unit.box
        tmp = str(own / "tmp" / unit.name)  # a /tmp of its own per unit
        assert unit.box[unit.box.index(tmp) - 1 : unit.box.index(tmp) + 2] == ("--bind", tmp, "/tmp")
        env = unit.processes[0].env
        assert env[ENV_BOX] == str(own) and env["HOME"] == str(own / "home") and env["USER"] == "phx-nlp"
        assert env["PATH"].startswith("/opt/venv/bin:") and "AWS_SECRET_ACCESS_KEY" not in env
        assert "PHALANX_HOME" not in env
    assert "box: " in dry.text() and "its whole environment" in dry.text()
    assert dry.native["units"][0]["box"] == list(dry.units[0].box)


def test_a_boxed_replica_reports_over_http_without_the_servers_home(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, token="server-token")
    env = tracking_env(EXPERIMENT_ID, settings, "/opt/venv/bin/python", isolation=ISO)
    assert "PHALANX_HOME" not in env and "PHALANX_INGESTER_PID" not in env
    assert env["PHALANX_SPOOL"] == str(box_folder(tmp_path, EXPERIMENT_ID) / "spool")
    assert env["PHALANX_HOST"] == ISO.report_to
    assert env["PHALANX_TOKEN"] == experiment_token(box_key(tmp_path), EXPERIMENT_ID)
    assert env["PHALANX_TOKEN"] != experiment_token("server-token", EXPERIMENT_ID)
    assert (tmp_path / "server" / "box.key").stat().st_mode & 0o777 == 0o600


def test_the_reaper_gets_the_secrets_names_never_their_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(boxes.SECRET_NAMES, "NLP_KEY,HF_TOKEN")
    config = boxes.reaper_config(ISO, ["bwrap", "--"], None)
    assert config["inherit"][-2:] == ["NLP_KEY", "HF_TOKEN"] and config["uid"] == 61000
    assert "LANG" in config["inherit"] and config["cgroup"] == []


def test_the_box_reads_its_interpreter_sdk_inputs_and_resume_checkpoint(tmp_path: Path) -> None:
    ctx = replace(
        context(
            PYTHONPATH="/home/sdk/1.0",
            PHALANX_INPUT_DIGITS="/cache/abc",
            PHALANX_RESUME_CHECKPOINT="/artifacts/x/checkpoint-5/state.pkl",
        ),
        isolation=ISO,
    )
    seen = boxes.read_only(ctx)
    assert {"/home/sdk/1.0", "/cache/abc", "/artifacts/x/checkpoint-5/state.pkl", boxes.PACKAGE_ROOT} <= set(
        seen
    )


def test_a_snapshot_stores_a_planted_link_as_a_link_never_what_it_points_at(tmp_path: Path) -> None:
    secret = tmp_path / "root-only.txt"
    secret.write_text("root's secret")
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print(1)\n")
    (work / "innocent.txt").symlink_to(secret)
    data, info = repro.snapshot(str(work))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["innocent.txt"].issym() and members["innocent.txt"].linkname == str(secret)
        assert tar.extractfile("train.py").read() == b"print(1)\n"  # type: ignore[union-attr]
    assert b"root's secret" not in data and info["files"] == 2


def test_root_writes_a_venvs_manifest_over_a_planted_link_not_through_it(tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("untouched")
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / buildenv.MANIFEST).symlink_to(target)
    write_new(tmp_path / "venv" / buildenv.MANIFEST, b"{}")
    assert target.read_text() == "untouched"
    assert not os.path.islink(tmp_path / "venv" / buildenv.MANIFEST)
    assert (tmp_path / "venv" / buildenv.MANIFEST).read_bytes() == b"{}"


def test_a_boxed_build_reads_the_wheels_this_machine_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """framework: horovod installs the machine's Horovod wheel by its path: the build's box binds it."""
    wheels = tmp_path / "wheels"
    (wheels / "horovod-key").mkdir(parents=True)
    given = tmp_path / "admin" / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"  # PHALANX_HOROVOD_WHEEL
    given.parent.mkdir()
    given.write_bytes(b"")
    monkeypatch.setenv("PHALANX_WHEELS_DIR", str(wheels))
    monkeypatch.setenv("PHALANX_HOROVOD_WHEEL", str(given))
    argv = buildenv.build_box(ISO, tmp_path / "venv", tmp_path / "work", tmp_path / "scratch")
    for path in (str(wheels), str(given)):
        at = argv.index(path)
        assert argv[at - 1 : at + 2] == ["--ro-bind", path, path]


def test_a_boxed_build_on_a_machine_that_built_no_wheel_binds_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bubblewrap refuses to bind a missing path: a fresh machine's build box names no wheels folder."""
    missing = tmp_path / "no-wheels-yet"
    monkeypatch.setenv("PHALANX_WHEELS_DIR", str(missing))
    monkeypatch.delenv("PHALANX_HOROVOD_WHEEL", raising=False)
    argv = buildenv.build_box(ISO, tmp_path / "venv", tmp_path / "work", tmp_path / "scratch")
    assert str(missing) not in argv
