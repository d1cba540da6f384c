"""A team on a real `phalanx server`: two projects (vision, nlp), an editor of each, a project secret
each, a dataset of vision's, fake GPU device nodes, and a server started with secrets of its own in
its environment (what a job must never see). Shared by the isolation tests (few server starts)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.server.serverproc import (
    PHALANX,
    Server,
    clean_env,
    start_server,
    stop_server,
    supervisors_gone,
)
from tests.support import s3 as s3_support
from tests.support.s3 import S3Server

from phalanx.apiclient import Client
from phalanx.bundles import pack
from phalanx.config import Settings
from phalanx.store import catalog, open_store, secrets
from phalanx.store.accounts import Accounts, Role

JOBS = Path(__file__).parent / "data" / "jobs"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TOKEN = "isolation-server-token-0123456789"
AWS_SECRET = "server-aws-secret-must-not-leak"
CANARY = "server-environment-canary"
SECRETS = {"vision": ("VISION_KEY", "vision-secret-9f2c"), "nlp": ("NLP_KEY", "nlp-secret-41ab")}
SERVER_KEY_ID = "server-key-id"
SERVER_SESSION = "server-session-token"
NLP_AWS = {"AWS_ACCESS_KEY_ID": "nlp-key-id", "AWS_SECRET_ACCESS_KEY": "nlp-aws-secret"}
BUCKET = "nlp-bucket"


@dataclass
class Team:
    server: Server
    tokens: dict[str, str]  # user -> personal token
    gpu_dir: Path
    s3: S3Server

    @property
    def home(self) -> Path:
        return self.server.home

    def client(self, user: str) -> Client:
        return Client(self.server.url, self.tokens[user])

    def submit(self, user: str, folder: Path, file: str, params: dict[str, Any] | None = None) -> str:
        return str(self.client(user).submit(folder / file, pack(folder), params or {}, 0)["id"])

    def api(self, path: str, token: str | None = TOKEN) -> Any:
        req = urllib.request.Request(f"{self.server.url}/api/v1{path}")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)

    def logs(self, exp_id: str) -> list[str]:
        return [line["text"] for line in self.api(f"/experiments/{exp_id}/logs?limit=5000")["lines"]]

    def wait_for_line(self, exp_id: str, text: str, seconds: float = 300) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = next((line for line in self.logs(exp_id) if text in line), None)
            if found is not None:
                return found
            status = self.api(f"/experiments/{exp_id}")["status"]
            assert status in ("created", "queued", "building", "starting", "pending", "running"), (
                f"{exp_id} ended ({status}) before printing {text!r}: {self.logs(exp_id)[-20:]}"
            )
            time.sleep(0.5)
        raise AssertionError(f"{exp_id} did not print {text!r} within {seconds} s")

    def wait_done(self, exp_id: str, seconds: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            exp = self.api(f"/experiments/{exp_id}")
            if exp["status"] in ("succeeded", "failed", "stopped"):
                return dict(exp)
            time.sleep(0.5)
        raise AssertionError(f"experiment {exp_id} did not end within {seconds} s")

    def post(self, path: str, user: str | None = None) -> None:
        """POST ``path`` as ``user`` (their personal token), or as the server's admin."""
        req = urllib.request.Request(f"{self.server.url}/api/v1{path}", method="POST")
        req.add_header("Authorization", f"Bearer {self.tokens[user] if user else TOKEN}")
        urllib.request.urlopen(req, timeout=60).close()

    def stop(self, exp_id: str) -> None:
        self.post(f"/experiments/{exp_id}/stop")
        self.wait_done(exp_id)


@dataclass(frozen=True)
class BoardProcess:
    """A TensorBoard service's process on this machine: its pid, uid and the socket it listens on."""

    pid: int
    uid: int
    socket: str


def board_process(service_id: str) -> BoardProcess:
    """The TensorBoard (the Python process, inside its box when boxed) of service ``service_id``."""
    for entry in Path("/proc").iterdir():
        try:
            argv = [a.decode() for a in (entry / "cmdline").read_bytes().split(b"\0")]
            status = (entry / "status").read_text()
        except OSError:
            continue
        if "phalanx.services.tensorboard" not in argv or f"/services/{service_id}" not in argv:
            continue
        if Path(argv[0]).name == "bwrap" or "setpriv" in Path(argv[0]).name:
            continue  # the box's own processes before the exec
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        return BoardProcess(int(entry.name), uid, argv[argv.index("--socket") + 1])
    raise AssertionError(f"no TensorBoard process of service {service_id}")


def phalanx(home: Path, *args: str, stdin: str = "") -> str:
    """A `phalanx` command on the server's machine, with the server's home (as its admin types it)."""
    r = subprocess.run(
        [str(PHALANX), *args], env=clean_env(home), input=stdin, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def fake_gpus(folder: Path) -> Path:
    """Device nodes named as NVIDIA's (/dev/nvidia0, nvidia1, nvidiactl), numbered as /dev/null:
    the box binds them as it would real ones (PHALANX_GPU_DEVICES_DIR)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        with contextlib.suppress(FileExistsError):
            try:
                os.mknod(folder / name, stat.S_IFCHR | 0o666, os.makedev(1, 3))
            except PermissionError:  # no CAP_MKNOD here: a file stands in for the node
                (folder / name).write_text("")
    return folder


def set_up(home: Path, data: Path) -> None:
    """Users, projects, roles, secrets and each project's data, as `phalanx admin|secret|data|datastore`
    make them (their store calls, in this process: a CLI start each would cost seconds)."""
    store = open_store(Settings(home=home))
    try:
        accounts = Accounts(store)
        accounts.add_user("root", "root-password", admin=True)
        for user, project in (("vic", "vision"), ("ada", "nlp")):
            accounts.add_user(user, f"{user}-password")
            accounts.add_project(project)
            accounts.set_member(project, user, Role.editor)
            name, value = SECRETS[project]
            secrets.put(store, home, project, name, value)
        for project, name in (("vision", "vision-digits"), ("nlp", "nlp-text")):
            folder = data / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "part-0.csv").write_text(f"{project},1\n")
            # as `phalanx data add` keeps it: copied into the server's home, which no box sees but
            # this version's own folder, read-only
            catalog.catalog_of(store, home).add_dataset(
                name, str(folder), copy_to=None, project=project, shared=False
            )
        for name, value in NLP_AWS.items():  # nlp reads its bucket with these, never the server's
            secrets.put(store, home, "nlp", name, value)
        catalog.add_datastore(store, "nlp-lake", f"s3://{BUCKET}/lake", project="nlp")
    finally:
        store.close()


def put_object(s3: S3Server, path: str, data: bytes) -> None:
    """An object written with the test's own credentials (moto accepts any)."""
    import s3fs  # the s3 extra: only the tests that use S3 need it

    fs = s3fs.S3FileSystem(key="writer", secret="writer", client_kwargs={"endpoint_url": s3.endpoint})
    fs.pipe(path, data)


def token_of(server: Server, user: str) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"  # a token per server start: a name is its user's once
    body = json.dumps({"username": user, "password": f"{user}-password", "name": name}).encode()
    req = urllib.request.Request(f"{server.url}/api/v1/tokens", data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as r:
        return str(json.load(r)["token"])


@contextlib.contextmanager
def running_team(home: Path, args: list[str] | None = None) -> Iterator[Team]:
    """The team's server over ``home`` (set up once per home), with credentials of its own in its
    environment, and an S3 API on loopback holding nlp's bucket."""
    if not (home / "phalanx.db").exists():
        set_up(home, home.parent / "vision-data")
    gpus = fake_gpus(home.parent / "fake-dev")
    s3 = s3_support.start()
    s3.create_bucket(BUCKET)
    put_object(s3, f"{BUCKET}/lake/part-0.csv", b"nlp,lake\n")
    env = {
        **s3.env(),  # the endpoint, and the server's own keys, which no job may read with
        "AWS_ACCESS_KEY_ID": SERVER_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_SESSION_TOKEN": SERVER_SESSION,  # (one a project's own AWS secrets do not override)
        "SERVER_CANARY": CANARY,
        "CUDA_VISIBLE_DEVICES": "0,1",
        "PHALANX_GPU_DEVICES_DIR": str(gpus),
    }
    try:
        server = start_server(home, token=TOKEN, env=env, args=args)
    except BaseException:
        s3.stop()
        raise
    team = Team(server, {}, gpus, s3)
    try:
        team.tokens.update({u: token_of(server, u) for u in ("vic", "ada")})
        yield team
    finally:
        for group in team.api("/groups"):  # a failed test's groups and jobs end here
            if group["status"] not in ("succeeded", "failed", "stopped"):
                with contextlib.suppress(OSError):
                    team.post(f"/groups/{group['id']}/stop")
        for exp in team.api("/experiments?limit=200")["items"]:
            if exp["status"] not in ("succeeded", "failed", "stopped"):
                with contextlib.suppress(OSError, AssertionError):
                    team.stop(exp["id"])
        supervisors_gone(server)
        stop_server(server.proc)
        s3.stop()


def job_folder(tmp: Path, name: str) -> Path:
    """A submitter's folder holding the jobs (each run picks its file)."""
    dest = tmp / name
    shutil.copytree(JOBS, dest)
    return dest


def example_folder(tmp: Path, example: str, project: str, changes: dict[str, str] | None = None) -> Path:
    """An example's folder, its file moved to ``project`` (and ``changes``: old text -> new)."""
    dest = tmp / f"{example}-{project}"
    shutil.copytree(EXAMPLES / example, dest)
    for file in dest.glob("*.yml"):
        text = file.read_text().replace("project: examples", f"project: {project}")
        for old, new in (changes or {}).items():
            assert old in text, f"{file.name} has no {old!r}"
            text = text.replace(old, new)
        file.write_text(text)
    return dest
