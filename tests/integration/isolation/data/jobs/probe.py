"""A hostile job that only looks: it tries to reach what a server-run job must never reach and
prints one line per probe (`PROBE <name> blocked|OPEN <detail>`), then exits 0 whatever it found.
What it aims at is in targets.json, written beside it by the test before the folder is submitted."""

from __future__ import annotations

import contextlib
import getpass
import grp
import json
import os
import pwd
import re
import socket
import sqlite3
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

T = json.loads(Path(__file__).with_name("targets.json").read_text())


def probe(name: str, attempt: Callable[[], object]) -> None:
    """OPEN when ``attempt`` returns something true (it got through), blocked when it raises or
    returns nothing."""
    try:
        got = attempt()
    except Exception as exc:
        print(f"PROBE {name} blocked {type(exc).__name__}: {exc}"[:300], flush=True)
        return
    state = "OPEN" if got else "blocked"
    print(f"PROBE {name} {state} {str(got)[:200]!r}", flush=True)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(64) or b"(empty file)"


def environ_holding(secret: bytes) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if secret in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(entry)
            except OSError:
                pass
    return found


def api(path: str) -> object:
    req = urllib.request.Request(T["api"] + path)
    req.add_header("Authorization", f"Bearer {os.environ.get('PHALANX_TOKEN', '')}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status == 200 and r.read(100)


def post_json(path: str, doc: object) -> object:
    req = urllib.request.Request(T["api"] + path, data=json.dumps(doc).encode(), method="POST")
    req.add_header("Authorization", f"Bearer {os.environ.get('PHALANX_TOKEN', '')}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status < 300 and r.read(100)


def put(path: str) -> object:
    req = urllib.request.Request(T["api"] + path, data=b"planted", method="PUT")
    req.add_header("Authorization", f"Bearer {os.environ.get('PHALANX_TOKEN', '')}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status < 300


def board_over_socket() -> object:
    """Another project's TensorBoard, straight at its Unix socket (not through the server)."""
    board = victim["board"]
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(board["socket"])
        s.sendall(f"GET /services/{board['id']}/data/runs HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        answer = s.recv(200)
    return b" 200 " in answer.split(b"\r\n")[0] and answer


def store_write() -> object:
    db = sqlite3.connect(T["store"], timeout=5)
    db.execute("UPDATE users SET is_admin = 1")
    db.commit()
    return "made every user a server admin"


def inherited() -> list[str]:
    """The descriptors beyond stdin, stdout and stderr this job started with (the launch lock its
    supervisor holds, the store's database, a server socket), each with what it points at."""
    found = []
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed once it was read
            continue
        if fd > 2:
            found.append(f"{fd}->{target}")
    return found


def other_accounts() -> list[str]:
    """Other projects' box accounts (``phx-<project>``, the names of the machine's projects) that
    the account database shows: its files, their backups, and what the name service lists."""
    own = os.environ.get("USER", "")
    names: set[str] = set()
    for path in ("/etc/passwd", "/etc/group", "/etc/passwd-", "/etc/group-", "/etc/shadow", "/etc/gshadow"):
        with contextlib.suppress(OSError):
            names |= set(re.findall(r"phx-[A-Za-z0-9_.-]+", Path(path).read_text(errors="replace")))
    names |= {p.pw_name for p in pwd.getpwall()} | {g.gr_name for g in grp.getgrall()}
    names |= {m for g in grp.getgrall() for m in g.gr_mem}
    return sorted(n for n in names if n.startswith("phx-") and n != own)


def other_cgroups() -> list[str]:
    """Cgroups under /sys/fs/cgroup of anything but this experiment: another experiment's (its id,
    its memory use), a notebook's, the victim's."""
    own = os.environ.get("PHALANX_EXPERIMENT_ID", "?")
    found = []
    for folder, dirs, _files in os.walk("/sys/fs/cgroup"):
        for name in dirs:
            theirs = Path(folder).name == "phalanx" and not name.startswith(f"{own}.")
            if theirs or victim["id"] in name:
                found.append(f"{folder}/{name}")
    return found


def own_cgroup_limit() -> str:
    """This replica's process-count limit, read where /proc/self/cgroup says its cgroup is."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for mount in ["pids"] if "pids" in names.split(",") else ["", "unified"] if names == "" else []:
            limit = Path("/sys/fs/cgroup", mount, path.lstrip("/"), "pids.max")
            if limit.exists():
                return limit.read_text().strip()
    return "none"


home, victim = T["home"], T["victim"]
probe("inherited_fds", inherited)  # first: before any probe opens a file of its own
probe("env_home", lambda: os.environ.get("PHALANX_HOME"))
probe("env_aws", lambda: [k for k, v in os.environ.items() if v in T["server_aws"]])
probe("env_canary", lambda: os.environ.get("SERVER_CANARY"))
probe("env_server_token", lambda: T["server_token"] in "".join(os.environ.values()))
# (the folders a box's own paths lie in are there as empty mount points: what counts is the content)
probe(
    "home_list", lambda: {"phalanx.db", "runs", "artifacts", "spool", "secrets.key"} & set(os.listdir(home))
)
probe("home_write", lambda: Path(home, "pwned").write_text("x"))
probe("store_read", lambda: read(T["store"]))
probe("store_write", store_write)
probe("secrets_key", lambda: read(T["secrets_key"]))
probe("box_key", lambda: read(T["box_key"]))
probe("token_file", lambda: read(T["token_file"]))
probe("victim_work_list", lambda: os.listdir(victim["work"]))
probe("victim_code", lambda: read(victim["code"]))
probe("victim_box", lambda: os.listdir(victim["box"]))
probe("victim_artifacts", lambda: os.listdir(victim["artifacts"]))
probe("victim_checkpoint", lambda: read(victim["checkpoint"]))
probe("victim_input", lambda: read(victim["input"]))
probe("victim_dataset_copy", lambda: read(victim["dataset_copy"]))
probe("victim_environ", lambda: read(f"/proc/{victim['pid']}/environ"))
probe("victim_secret_in_proc", lambda: environ_holding(victim["secret"].encode()))
probe("victim_signal", lambda: os.kill(victim["pid"], 0) or "may signal it")
probe("api_experiments", lambda: api("/api/v1/experiments"))
probe("api_victim", lambda: api(f"/api/v1/experiments/{victim['id']}"))
probe("api_audit", lambda: api("/api/v1/admin/audit"))
probe("api_add_admin", lambda: post_json("/api/v1/admin/users", {"name": "mallory", "admin": True}))
probe("api_add_project", lambda: post_json("/api/v1/admin/projects", {"name": "mallory"}))
probe("api_dataset", lambda: api(f"/api/v1/datasets/{victim['dataset']}/versions/1"))
probe("victim_board_socket", board_over_socket)
probe("api_victim_board", lambda: api(f"/services/{victim['board']['id']}/data/runs"))
probe("api_start_board", lambda: post_json("/api/v1/services", {"experiment": victim["id"]}))
probe("api_victim_files", lambda: put(f"/api/v1/experiments/{victim['id']}/files/planted.txt"))
probe("other_accounts", other_accounts)
probe("other_cgroups", other_cgroups)
# what it must have: its own project's secret, the GPU it asked for, its own account's name, its limit
print(f"OWN secret={os.environ.get(T['own_secret_name'], '')!r}", flush=True)
print(f"OWN gpus={os.environ.get('CUDA_VISIBLE_DEVICES')!r} nodes={sorted(os.listdir('/dev'))!r}", flush=True)
print(
    f"OWN uid={os.getuid()} processes={sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}",
    flush=True,
)
whoami = subprocess.run(["whoami"], capture_output=True, text=True).stdout.strip()
ids = subprocess.run(["id"], capture_output=True, text=True).stdout.strip()
print(
    f"OWN account whoami={whoami} pwd={pwd.getpwuid(os.getuid()).pw_name} getuser={getpass.getuser()}"
    f" group={grp.getgrgid(os.getgid()).gr_name} id={ids!r}",
    flush=True,
)
print(f"OWN cgroup pids.max={own_cgroup_limit()}", flush=True)
