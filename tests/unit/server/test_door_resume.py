"""`phalanx resume` and `rerun` take one door (--server or --local, never both), and the server's
``POST /experiments/{id}/resume`` refuses what `phalanx resume` refuses on this machine, with the
same words: a succeeded experiment (409, naming `phalanx rerun`), one whose folder is gone (400).
Nothing starts here (tests/unit starts no process); a resume that runs is
tests/integration/server/test_remote_commands.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from phalanx.cli.main import main
from phalanx.domain import ExperimentStatus
from phalanx.store.base import Store
from tests.unit.server import fill

URL = "http://gpu-box:8000"


@pytest.mark.parametrize("command", ["resume", "rerun"])
def test_resume_and_rerun_take_one_door(
    command: str, phalanx_home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        main([command, "3f2a9c0d41be", "--server", URL, "--local"])
    _, err = capfd.readouterr()
    assert ended.value.code == 2 and "--server and --local: give one" in err and "Traceback" not in err


def test_the_server_refuses_a_resume_as_this_machine_does(
    client: TestClient, store: Store, tmp_path: Path
) -> None:
    done = fill.experiment(store, status=ExperimentStatus.SUCCEEDED)
    store.set_repro(done.id, {"launch": {"file": "exp.yml", "workdir": str(tmp_path)}})
    r = client.post(f"/api/v1/experiments/{done.id}/resume")
    assert r.status_code == 409, r.text
    said = r.json()["message"]
    assert "only a failed or stopped one can be resumed (use `phalanx rerun` to run it again)" in said

    failed = fill.experiment(store, status=ExperimentStatus.FAILED)
    gone = tmp_path / "gone"
    store.set_repro(failed.id, {"launch": {"file": "exp.yml", "workdir": str(gone)}})
    r = client.post(f"/api/v1/experiments/{failed.id}/resume")
    assert r.status_code == 400 and f"the experiment's folder {gone} is gone" in r.json()["message"]
    assert store.get_experiment(failed.id).status is ExperimentStatus.FAILED  # nothing started
