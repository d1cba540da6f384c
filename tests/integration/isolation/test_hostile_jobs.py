"""Hostile jobs on a team server (issue 36, invariant 6): an editor of nlp submits an ordinary job
that tries to reach the server's home, store, keys, token file and environment, another project's
experiment (its folder, code, artifacts, checkpoint, input, environment, processes, cgroup), other
projects' accounts (their names, in /etc/passwd and /etc/group) and the API beyond its own
experiment, while vision's experiment runs. On a server that runs as root every probe fails and the
job still succeeds; with `--trust-submitters` (the box off) the same probes get through, which
proves they would notice a hole."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.isolation.team import (
    AWS_SECRET,
    CANARY,
    JOBS,
    NLP_AWS,
    SECRETS,
    SERVER_KEY_ID,
    SERVER_SESSION,
    TOKEN,
    Team,
    board_process,
    example_folder,
    job_folder,
    running_team,
)
from tests.support.slurm import LocalSlurm

from phalanx.bundles import pack
from phalanx.clusters import add_cluster
from phalanx.machine import cgroups

pytestmark = pytest.mark.timeout(900)

# what the same probes reach when the job runs as the server (the box off)
REACHED_UNBOXED = {
    "env_home",
    "env_aws",
    "env_canary",
    "home_list",
    "home_write",
    "store_read",
    "store_write",
    "secrets_key",
    "token_file",
    "victim_work_list",
    "victim_code",
    "victim_artifacts",
    "victim_checkpoint",
    "victim_input",
    "victim_dataset_copy",
    "victim_environ",
    "victim_secret_in_proc",
    "victim_signal",
    "victim_board_socket",
}


PROBES = len(re.findall(r"^probe\(", (JOBS / "probe.py").read_text(), re.M))  # each probe's call


@pytest.fixture(scope="module")
def team_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("team") / "home"
    home.mkdir()
    return home


@pytest.fixture(scope="module")
def team(team_home: Path) -> Iterator[Team]:
    with running_team(team_home) as t:
        yield t


def start_victim(team: Team, tmp: Path) -> tuple[str, int]:
    """vision's job, running and holding its checkpoint: its id and its replica's pid."""
    victim = team.submit("vic", job_folder(tmp, "vision-work"), "victim.yml")
    team.wait_for_line(victim, "VICTIM READY")
    pid = int(team.api(f"/experiments/{victim}/replicas")[0]["pid"])
    return victim, pid


def targets(team: Team, victim: str, pid: int) -> dict[str, Any]:
    home = team.home
    artifacts = home / "artifacts" / victim
    checkpoint = next(p for p in artifacts.rglob("*") if p.is_file() and "checkpoint" in str(p))
    cache = next((home / "cache").iterdir())
    board = team.client("vic").send("POST", "/services", {"experiment": victim})  # vision's TensorBoard
    return {
        "api": team.server.url,
        "home": str(home),
        "store": str(home / "phalanx.db"),
        "secrets_key": str(home / "secrets.key"),
        "box_key": str(home / "server" / "box.key"),
        "token_file": str(home / "server.token"),
        "server_token": TOKEN,
        "server_aws": [AWS_SECRET, SERVER_KEY_ID, SERVER_SESSION],
        "own_secret_name": SECRETS["nlp"][0],
        "victim": {
            "id": victim,
            "pid": pid,
            "work": str(home / "server" / "work" / victim),
            "code": str(home / "server" / "work" / victim / "victim.py"),
            "box": str(home / "boxes" / victim),
            "artifacts": str(artifacts),
            "checkpoint": str(checkpoint),
            "input": str(next(p for p in cache.rglob("*") if p.is_file())),
            # its dataset's bytes as `data add` keeps them, in the server's home
            "dataset_copy": str(next((home / "data" / "datasets" / "vision-digits").rglob("part-0.csv"))),
            "secret": SECRETS["vision"][1],
            "dataset": "vision-digits",
            "board": {"id": board["id"], "socket": board_process(board["id"]).socket},
        },
    }


def run_probe(
    team: Team, tmp: Path, aims: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """nlp's hostile job, to its end: the experiment, each probe's state, and its other lines."""
    folder = job_folder(tmp, "nlp-work")
    (folder / "targets.json").write_text(json.dumps(aims))
    probe = team.submit("ada", folder, "probe.yml")
    exp = team.wait_done(probe)
    lines = team.logs(probe)
    states = {p[1]: p[2] for p in (line.split(" ", 3) for line in lines if line.startswith("PROBE "))}
    return exp, states, lines


def test_a_hostile_job_reaches_nothing_of_the_server_or_another_project_and_still_succeeds(
    team: Team, tmp_path: Path
) -> None:
    victim, pid = start_victim(team, tmp_path)
    aims = targets(team, victim, pid)
    exp, states, lines = run_probe(team, tmp_path, aims)
    assert exp["status"] == "succeeded", lines[-30:]
    assert len(states) == PROBES, lines  # every probe ran
    opened = {name for name, state in states.items() if state != "blocked"}
    assert not opened, [line for line in lines if " OPEN " in line]
    # nothing was written where it tried, and no account became an admin
    assert not (team.home / "pwned").exists()
    with sqlite3.connect(team.home / "phalanx.db") as db:
        admins = {row[0] for row in db.execute("SELECT name FROM users WHERE is_admin = 1")}
    assert admins == {"root"}
    files = team.api(f"/experiments/{victim}/artifacts")
    assert not any("planted" in str(a) for a in files)
    # what it must have: its own project's secret, its GPU (device node and CUDA_VISIBLE_DEVICES),
    # another uid than root's, and no process but its own
    own = {line.split(" ", 2)[1].split("=", 1)[0]: line for line in lines if line.startswith("OWN ")}
    assert f"secret={SECRETS['nlp'][1]!r}" in own["secret"]
    gpu = own["gpus"].split("gpus=")[1].split(" ")[0].strip("'")
    assert gpu in ("0", "1") and f"'nvidia{gpu}'" in own["gpus"] and "'nvidiactl'" in own["gpus"]
    assert f"'nvidia{1 - int(gpu)}'" not in own["gpus"]  # the other GPU is not its
    uid = int(own["uid"].split("uid=")[1].split(" ")[0])
    assert uid != 0
    assert len(own["uid"].split("processes=")[1].split(",")) <= 3, own["uid"]  # bwrap's init, itself
    # its own account still resolves, though no other project's shows (probe other_accounts), and
    # its own cgroup is where /proc/self/cgroup says, though no other experiment's is (other_cgroups)
    assert "whoami=phx-nlp pwd=phx-nlp getuser=phx-nlp group=phx-nlp" in own["account"], own["account"]
    assert f"uid={uid}(phx-nlp)" in own["account"], own["account"]
    if cgroups.describe().startswith("cgroup"):
        assert own["cgroup"].endswith("pids.max=4096"), own["cgroup"]

    # nor may it name vision's dataset as its input: the submit is accepted (inputs resolve when it
    # starts), and the start refuses it as if there were none; its command never runs
    stolen = team.submit("ada", job_folder(tmp_path, "nlp-steal"), "steal.yml")
    refused = team.wait_done(stolen)
    assert refused["status"] == "failed", refused
    assert "no dataset 'vision-digits@latest' in project nlp" in str(refused["reason"]), refused
    assert not any("stolen" in line for line in team.logs(stolen))
    # nor learn vision's names from a near miss: no "did you mean 'vision-digits'?"
    near = team.wait_done(team.submit("ada", job_folder(tmp_path, "nlp-near"), "steal_near.yml"))
    said = str(near["reason"])
    assert near["status"] == "failed" and "in project nlp, nor shared with it" in said, near
    assert "vision-digits'" not in said and "did you mean" not in said, near

    # vision's job was not disturbed: stopped now, then resumed by its editor through the server's
    # door (POST .../resume), in the same box as its first run, from its checkpoint
    ready = team.wait_for_line(victim, "VICTIM READY")
    team.stop(victim)
    team.post(f"/experiments/{victim}/resume", user="vic")
    assert team.wait_done(victim)["status"] == "succeeded"
    resumed = next(line for line in team.logs(victim) if line.startswith("RESUMED"))
    assert "step=5" in resumed and "weights" in resumed, resumed
    uid = ready.split("uid=")[1].split()[0]
    assert uid != "0" and f"uid={uid} home=None" in resumed, (ready, resumed)
    # vision's TensorBoard, which the job could not reach, runs as vision's account too
    assert board_process(aims["victim"]["board"]["id"]).uid == int(uid)


def test_with_trust_submitters_the_same_probes_get_through(tmp_path: Path) -> None:
    """The box off (the server trusts its submitters): the suite sees what it is there to see.
    A home of its own: one server per home (the boxed team's runs meanwhile)."""
    home = tmp_path / "trusting"
    home.mkdir()
    with running_team(home, args=["--trust-submitters"]) as trusting:
        victim, pid = start_victim(trusting, tmp_path)
        aims = targets(trusting, victim, pid)
        exp, states, lines = run_probe(trusting, tmp_path, aims)
        trusting.stop(victim)
    assert exp["status"] == "succeeded", lines[-30:]
    reached = {name for name, state in states.items() if state == "OPEN"}
    assert reached >= REACHED_UNBOXED, (REACHED_UNBOXED - reached, lines)
    assert any(line.startswith("PROBE env_aws OPEN") and "AWS_SESSION_TOKEN" in line for line in lines)
    assert any(CANARY in line for line in lines)


def test_ordinary_work_runs_in_the_box(team: Team, tmp_path: Path) -> None:
    """DDP over gloo (metrics and a saved model), DDP under one mpirun, and a job with a venv built
    in its box reading its dataset in place: each succeeds boxed, as its project's account."""
    jobs = {
        "ddp": (example_folder(tmp_path, "pytorch-ddp", "nlp"), "polyaxonfile.yml", {"epochs": 3}),
        "mpi": (example_folder(tmp_path, "pytorch-mpi", "nlp"), "polyaxonfile.yml", {"epochs": 3}),
        "builder": (job_folder(tmp_path, "nlp-build"), "builder.yml", {}),
    }
    ids = {name: team.submit("ada", folder, file, params) for name, (folder, file, params) in jobs.items()}
    done = {name: team.wait_done(exp_id, seconds=600) for name, exp_id in ids.items()}
    for name, exp in done.items():
        assert exp["status"] == "succeeded", (name, team.logs(ids[name])[-30:])
    for name, series in (("ddp", 2), ("mpi", 1)):  # (the MPI example reports its test accuracy once)
        accuracy = team.api(f"/experiments/{ids[name]}/metrics/accuracy")["series"]
        assert len(accuracy) == series and all(s["values"][-1] > 0.5 for s in accuracy.values()), accuracy
    models = team.api(f"/experiments/{ids['ddp']}/models")
    assert models and all(str(m["name"]).startswith("digits-mlp") for m in models), models
    lines = team.logs(ids["builder"])
    assert any(line.startswith("BUILT tabulate") and "/venvs/boxes/phx-nlp/" in line for line in lines)
    assert any(line.startswith("MOUNTED") and "part-0.csv" in line for line in lines)
    assert any(line.startswith("INPUT READ-ONLY") for line in lines), lines
    assert any(line.startswith("LAKE") and "part-0.csv" in line for line in lines), lines
    # its bucket was read with nlp's own credentials (a project secret), never the server's
    keys = {r["key"] for r in team.s3.requests() if "/nlp-bucket" in r["path"] and r["method"] == "GET"}
    assert keys == {NLP_AWS["AWS_ACCESS_KEY_ID"]}, keys
    assert team.api(f"/experiments/{ids['builder']}/metrics/rows")["series"]
    account = pwd.getpwnam("phx-nlp")
    for exp_id in ids.values():  # each ran as nlp's account, in its own box folder
        assert (team.home / "boxes" / exp_id).stat().st_uid == account.pw_uid
    venv = next((team.home / "venvs" / "boxes" / "phx-nlp").glob(".build-*"))
    assert venv.stat().st_uid == account.pw_uid


def test_tensorflow_ps_and_horovod_run_in_the_box_with_venvs_built_there(team: Team, tmp_path: Path) -> None:
    """The two frameworks whose wiring starts servers and an MPI launcher: a TensorFlow chief, two
    workers and a ps (its tensorflow-cpu venv built in nlp's box), and Horovod on two ranks over
    mpirun (its venv built in the box from the wheel this machine built once, bound read-only)."""
    # TensorFlow's coordinator (not Phalanx) segfaults now and then under CI load right after it
    # starts coordinating (tests/integration/slurm/test_frameworks_live.py met it too); a user meets
    # that with run.max_restarts, and so does this test: any restart must be that crash
    restart = {"run:\n  cmd:": "run:\n  max_restarts: 1\n  cmd:"}
    jobs = {
        "ps": (example_folder(tmp_path, "tensorflow-ps", "nlp", restart), {"steps": 150}),
        "horovod": (example_folder(tmp_path, "horovod", "nlp"), {"epochs": 3}),
    }
    ids = {name: team.submit("ada", folder, "polyaxonfile.yml", p) for name, (folder, p) in jobs.items()}
    # a first build of either venv takes minutes on a loaded 2-core machine
    done = {name: team.wait_done(exp_id, seconds=840) for name, exp_id in ids.items()}
    for name, exp in done.items():
        assert exp["status"] == "succeeded", (name, team.logs(ids[name])[-30:])
    attempts = team.api(f"/experiments/{ids['ps']}/run")["attempts"]
    for attempt in attempts[:-1]:
        assert "killed by SIGSEGV" in (attempt["reason"] or ""), attempts
    chief = team.api(f"/experiments/{ids['ps']}/metrics/accuracy")["series"]["test"]
    assert chief["values"][-1] >= 0.9, chief
    ranks = team.api(f"/experiments/{ids['horovod']}/metrics/accuracy")["series"]
    assert sorted(ranks) == ["rank 0", "rank 1"], ranks
    account = pwd.getpwnam("phx-nlp")
    for exp_id in ids.values():
        assert (team.home / "boxes" / exp_id).stat().st_uid == account.pw_uid
    built = [p for p in (team.home / "venvs" / "boxes" / "phx-nlp").iterdir() if p.is_dir()]
    assert len(built) >= 2 and all(p.stat().st_uid == account.pw_uid for p in built), built


def test_a_groups_trials_run_boxed_and_are_pruned(team: Team, tmp_path: Path) -> None:
    folder = example_folder(
        tmp_path,
        "digits-sweep",
        "nlp",
        # 3 one-replica trials: the third is the first that the median rule may prune
        {
            "n_experiments: 8": "n_experiments: 3",
            "warmup_steps: 3": "warmup_steps: 1",
            "n_workers: 1": "n_workers: 0",
        },
    )
    group = team.submit("ada", folder, "group.yml", {"epochs": 3})
    deadline = time.monotonic() + 900
    while (found := team.api(f"/groups/{group}"))["status"] not in ("succeeded", "failed", "stopped"):
        assert time.monotonic() < deadline, found
        time.sleep(1)
    trials = found["trials"]
    assert found["status"] == "succeeded" and len(trials) == 3, found
    account = pwd.getpwnam("phx-nlp")
    for trial in trials:
        assert (team.home / "boxes" / trial["experiment_id"]).stat().st_uid == account.pw_uid
    # the search read each trial's accuracy (sent over HTTP from its box) to prune or rank it
    assert all(t["state"] in ("done", "pruned") and t["value"] is not None for t in trials), trials


@pytest.mark.slurm
def test_a_servers_slurm_job_runs_as_its_projects_account_with_none_of_the_servers_environment(
    team: Team, slurm_cluster: LocalSlurm, tmp_path: Path
) -> None:
    add_cluster(slurm_cluster.cluster(), team.home, replace=True)  # `phalanx cluster add` on the server
    folder = job_folder(tmp_path, "nlp-slurm")
    exp_id = str(
        team.client("ada").submit(
            folder / "whoami.yml", pack(folder), {}, 0, extra={"target": slurm_cluster.name}
        )["id"]
    )
    exp = team.wait_done(exp_id)
    lines = team.logs(exp_id)
    assert exp["status"] == "succeeded" and exp["backend"] == "slurm", lines
    account = pwd.getpwnam("phx-nlp")
    assert f"IDENTITY phx-nlp {account.pw_uid}" in lines, lines
    env = "\n".join(line for line in lines if line.startswith("ENV "))
    for leak in (AWS_SECRET, CANARY, TOKEN, "PHALANX_HOME=", str(team.home / "spool")):
        assert leak not in env, leak
    assert "PHALANX_TOKEN=phx-exp." + exp_id in env  # its write-only token, as every replica's


PRELOADED = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {
    FILE *f = fopen("%s", "a");
    if (f) { fprintf(f, "uid=%%d\n", (int)getuid()); fclose(f); }
}
"""


def test_a_jobs_loader_variables_never_reach_what_runs_as_root(team: Team, tmp_path: Path) -> None:
    """An editor's file names a library of theirs in LD_PRELOAD (its `env:` and its build's
    `env_vars`): bubblewrap and setpriv, which run as root before the box drops to the project's
    account, must never load it; the job's own processes get the variable as written."""
    lab = Path(tempfile.mkdtemp(prefix="phalanx-preload-"))  # outside pytest's 0700 folder: any uid
    try:
        os.chmod(lab, 0o777)
        marks = lab / "loaded-by"
        (lab / "evil.c").write_text(PRELOADED % marks)
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-o", str(lab / "evil.so"), str(lab / "evil.c")], check=True
        )
        folder = tmp_path / "preload"
        folder.mkdir()
        (folder / "preload.yml").write_text(
            "version: 1\nkind: experiment\nname: preload\nproject: nlp\n"
            f"env: {{LD_PRELOAD: {lab / 'evil.so'}}}\n"
            f"build: {{build_steps: ['true'], env_vars: {{LD_PRELOAD: {lab / 'evil.so'}}}}}\n"
            'run: {cmd: echo "PRELOAD=$LD_PRELOAD UID=$(id -u)"}\n'
        )
        # nor may a project's admin name a secret after it (secrets join the environment root's
        # processes start from while replicas start; a boxed unit's reaper reads them on its stdin)
        secret = f"{team.server.url}/api/v1/projects/nlp/secrets/LD_PRELOAD"
        with pytest.raises(urllib.error.HTTPError) as refused:
            _send(secret, "PUT", {"value": str(lab / "evil.so")})
        assert refused.value.code == 400 and b"programs read to load or run code" in refused.value.read()
        job = team.submit("ada", folder, "preload.yml")
        done = team.wait_done(job)
        lines = team.logs(job)
        assert done["status"] == "succeeded", lines[-20:]
        said = next(line for line in lines if line.startswith("PRELOAD="))
        assert said.startswith(f"PRELOAD={lab / 'evil.so'} UID=") and not said.endswith("UID=0")
        loaded = marks.read_text().split() if marks.exists() else []
        assert "uid=0" not in loaded, loaded  # root never ran the library
    finally:
        shutil.rmtree(lab, ignore_errors=True)


PLANTED = """import os
with open({marks!r}, "a") as marks:
    marks.write(f"uid={{os.getuid()}} {{__name__}}\\n")
"""
# modules root's Python (the supervisor, a unit's reaper) imports after it started in the job's folder
SHADOWED = ("json", "selectors", "ctypes", "subprocess", "yaml", "sqlalchemy")


def test_a_bundle_that_shadows_python_modules_runs_nothing_as_root(team: Team, tmp_path: Path) -> None:
    """An editor's bundle holds json.py, selectors.py, sqlalchemy.py...: the supervisor and the
    reapers start in its folder, as root, and import those names after their start. Python puts
    the folder a `-m` or `-c` program starts in first on its path: none of them may read it."""
    lab = Path(tempfile.mkdtemp(prefix="phalanx-shadow-"))  # outside pytest's 0700 folder: any uid
    try:
        os.chmod(lab, 0o777)
        marks = lab / "imported-by"
        folder = tmp_path / "shadow"
        folder.mkdir()
        for name in SHADOWED:
            (folder / f"{name}.py").write_text(PLANTED.format(marks=str(marks)))
        (folder / "shadow.yml").write_text(
            "version: 1\nkind: experiment\nname: shadow\nproject: nlp\n"
            "environment: {replicas: {n_workers: 1}}\nframework: pytorch\n"
            'run: {cmd: echo "SHADOW UID=$(id -u)"}\n'
        )
        job = team.submit("ada", folder, "shadow.yml")
        done = team.wait_done(job)
        lines = team.logs(job)
        imported = marks.read_text().splitlines() if marks.exists() else []
        assert imported == [], imported  # nothing of the bundle ran outside the job's own processes
        assert done["status"] == "succeeded", lines[-20:]
        assert sum(line.startswith("SHADOW UID=") for line in lines) == 2  # both replicas ran
    finally:
        shutil.rmtree(lab, ignore_errors=True)


def _send(url: str, method: str, doc: Any = None) -> None:
    """``method`` ``url`` as the server's admin (a JSON body when ``doc``)."""
    request = urllib.request.Request(
        url, method=method, data=None if doc is None else json.dumps(doc).encode()
    )
    request.add_header("Authorization", f"Bearer {TOKEN}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60):
        pass
