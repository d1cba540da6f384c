"""A hostile model on a team server that boxes: registering an editor's ONNX file re-runs its parity
check with onnxruntime, and that check runs in the project's box (a process of its own, as the
project's account, with nothing of the server's home, environment or network), held to a deadline
and an address-space cap; its crash is answered as a refusal (docs/security.md)."""

from __future__ import annotations

import json
import os
import pwd
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from tests.integration.isolation.team import AWS_SECRET, CANARY, TOKEN, Team, running_team
from tests.support.onnx_models import hungry_onnx, random_linear, record_model, spinning_onnx

from phalanx.config import Settings
from phalanx.errors import UsageError
from phalanx.machine import box, identities
from phalanx.machine.box import Isolation
from phalanx.registry.parity_process import CHILD, check_boxed
from phalanx.store import open_store
from phalanx.tracking.models import _parity_arrays

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or bool(box.missing_tools()), reason="boxing needs root and bubblewrap"
    ),
    pytest.mark.timeout(600),
]

X = np.random.default_rng(1).normal(size=(2, 64)).astype(np.float32)  # record_model's example input


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    home = tmp_path_factory.mktemp("models") / "home"
    home.mkdir()
    with running_team(home) as t:
        yield t


def nlp_experiment(team: Team, models: dict[str, tuple[bytes, np.ndarray | None]]) -> str:
    """An experiment of nlp holding ``models`` (name -> file, and the output its check recorded),
    as a job's save_model leaves them."""
    store = open_store(Settings(home=team.home))
    try:
        exp = store.create_experiment(name="hostile-model", project="nlp").id
        for name, (data, output) in models.items():
            record_model(store, exp, name, data, output=output)
        return exp
    finally:
        store.close()


def register(team: Team, name: str, experiment: str, model: str) -> tuple[int, Any]:
    """POST the registration as ada (an editor of nlp): its status and answer."""
    body = json.dumps({"experiment_id": experiment, "model": model}).encode()
    req = urllib.request.Request(f"{team.server.url}/api/v1/models/{name}/versions", data=body, method="POST")
    req.add_header("Authorization", f"Bearer {team.tokens['ada']}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=500) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def check_processes(uid: int | None = None, ancestor: int | None = None) -> list[int]:
    """The parity check's Python processes (not the box's bubblewrap or setpriv) running as ``uid``
    (a box's account: no other test's check runs as it, and one its box left behind, reparented,
    is found all the same) or started by ``ancestor`` (whatever account they run as)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = [a.decode() for a in (entry / "cmdline").read_bytes().split(b"\0")]
            owner = entry.stat().st_uid
        except OSError:
            continue
        if CHILD not in argv or Path(argv[0]).name in ("bwrap", "setpriv"):
            continue
        if owner == uid or (ancestor is not None and ancestor in _parents(entry)):
            found.append(int(entry.name))
    return found


def _parents(proc: Path) -> list[int]:
    """The process ids above ``proc`` (/proc/PID), up to the first that is gone or init."""
    chain: list[int] = []
    while True:
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return chain
        if parent <= 1 or parent in chain:
            return chain
        chain.append(parent)
        proc = Path(f"/proc/{parent}")


def test_a_models_check_runs_in_its_projects_box_and_its_crash_is_a_clear_refusal(team: Team) -> None:
    exp = nlp_experiment(team, {"digits": (random_linear(3), None), "spin": (spinning_onnx(), X)})
    # an ordinary model registers, checked in the box: its parity figure and signature
    status, created = register(team, "digits", exp, "digits")
    assert status == 201, created
    assert created["lineage"]["parity"]["passed"] is True, created
    assert created["signature"]["inputs"] == [{"name": "input", "dtype": "float32", "shape": [None, 64]}]

    # a model onnxruntime runs without end: its check holds a process of its own, which is looked at
    answers: list[tuple[int, Any]] = []
    waiting = threading.Thread(
        target=lambda: answers.append(register(team, "spin", exp, "spin")), daemon=True
    )
    waiting.start()
    deadline = time.monotonic() + 120
    nlp = pwd.getpwnam("phx-nlp").pw_uid
    while not (found := check_processes(ancestor=team.server.proc.pid)):
        assert waiting.is_alive(), f"the registration ended with no check process of its own: {answers}"
        assert time.monotonic() < deadline, "no parity check process appeared: it ran in the server's"
        time.sleep(0.2)
    [pid] = found
    proc = Path(f"/proc/{pid}")
    uid = int(
        next(line for line in (proc / "status").read_text().splitlines() if line.startswith("Uid:")).split()[
            1
        ]
    )
    assert uid == nlp  # nlp's account, not the server's (root)
    # the server's home (store, keys, token) does not exist in its view of the files; /usr does
    seen = Path(f"/proc/{pid}/root")
    assert (seen / "usr").is_dir()
    assert not (seen / team.home.relative_to("/")).exists()
    assert not (seen / team.home.relative_to("/") / "phalanx.db").exists()
    environ = (proc / "environ").read_bytes().decode(errors="replace")
    for leak in (CANARY, AWS_SECRET, TOKEN, "PHALANX_HOME="):
        assert leak not in environ, leak
    assert os.readlink(proc / "ns" / "net") != os.readlink("/proc/self/ns/net")  # no network of the host's
    assert os.readlink(proc / "ns" / "mnt") != os.readlink("/proc/self/ns/mnt")

    # it crashes (killed here): the editor gets a refusal saying so, and nothing is registered
    os.kill(pid, signal.SIGKILL)
    waiting.join(timeout=120)
    [(status, refused)] = answers
    assert status == 400, refused
    assert (
        "spin.onnx: the parity check's process ended without an answer (killed by SIGKILL"
        in refused["message"]
    )
    assert not check_processes(nlp)
    with pytest.raises(urllib.error.HTTPError) as missing:
        team.api("/models/spin")
    assert missing.value.code == 404


def box_of(home: Path) -> Isolation:
    account = identities.ensure_account("box-tests", None, home)
    return Isolation(account.name, account.uid, account.gid, "box-tests", "http://127.0.0.1:9")


def test_a_check_past_its_deadline_is_refused_and_its_box_ends(phalanx_home: Path) -> None:
    metadata = _parity_arrays(["input"], [X], ["output"], [X])
    with pytest.raises(UsageError, match=r"spin\.onnx: the parity check did not finish within 3 s"):
        check_boxed(spinning_onnx(), metadata, box_of(phalanx_home), "e/spin.onnx", seconds=3)
    assert not check_processes(box_of(phalanx_home).uid)


def test_a_model_that_asks_for_more_memory_than_the_check_may_use_fails_to_load_it(
    phalanx_home: Path,
) -> None:
    metadata = _parity_arrays(["input"], [X], ["output"], [X])
    iso = box_of(phalanx_home)
    assert check_boxed(hungry_onnx(16), metadata, iso, "e/hungry.onnx").parity.passed  # within its cap
    # 1.5 GiB asked of a 1 GiB cap: refused at the allocation, never taken from the machine
    checked = check_boxed(hungry_onnx(1536), metadata, iso, "e/hungry.onnx", memory=1024 * 2**20)
    assert not checked.parity.passed and checked.signature is None
    assert "Failed to allocate memory" in (checked.parity.problem or ""), checked.parity
