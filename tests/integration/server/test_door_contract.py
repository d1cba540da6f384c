"""The contract of one door (issue 38): every command that acts on both doors answers the same on
both. The server's own machine (`--local` over the server's home) is one door; a laptop's home
through a real `phalanx server` on loopback (`--server URL` with the server's token) is the other,
over the same store. A read prints the same bytes on both; a write made through each door (on a
name of its own) prints the same answer, and the server's machine then holds both. A command of
both doors that this file does not run names the test that proves it (ELSEWHERE); a new one with
neither fails here, so a capability the server lacks cannot fall back to the laptop's store.

The CLI runs in this process (tests/support/cli.py); the server is a process of its own."""

from __future__ import annotations

import ast
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.integration.server.serverproc import TRUSTING, running_server
from tests.support.cli import Done, phalanx_cli
from tests.unit.cli.test_doors import BOTH, DOORS

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parent / "data"
TOKEN = "door-contract-token-0123456789abcdef"
MODEL = """import torch
from phalanx import Task

Task.init(project_name="remote-tests", task_name="tiny-model")
Task.current_task().save_model(torch.nn.Linear(4, 2), "tiny", example_input=torch.randn(3, 4))
"""
TRIAL = "import sys\nfrom phalanx import log_metrics\nlog_metrics(step=1, loss=float(sys.argv[1]))\n"
GROUP = """version: 1
kind: group
name: contract-grid
project: remote-tests
hptuning:
  concurrency: 1
  grid_search: {}
  metric: {name: loss, optimization: minimize}
  matrix:
    x: {values: [0.2, 0.1]}
run:
  cmd: python trial.py {{ x }}
"""


@dataclass(frozen=True)
class Doors:
    """The server's home and URL, a laptop's home, and what the setup made there."""

    home: Path
    url: str
    laptop: Path
    ids: dict[str, str]
    folder: Path

    def here(self, *args: str, input: str = "") -> Done:
        """`phalanx ARGS --local` on the server's machine."""
        return phalanx_cli(*args, "--local", env={"PHALANX_HOME": str(self.home)}, input=input)

    def there(self, *args: str, input: str = "") -> Done:
        """`phalanx ARGS --server URL` from the laptop, with the server's token."""
        env = {"PHALANX_HOME": str(self.laptop), "PHALANX_TOKEN": TOKEN}
        return phalanx_cli(*args, "--server", self.url, env=env, input=input)

    def fill(self, args: tuple[str, ...], door: str = "") -> tuple[str, ...]:
        """The case's words with the setup's ids; ``{d}``: this door's own name, ``{x}``: its own
        experiment (a for here, b for there)."""
        own = self.ids["b" if door == "there" else "a"]
        return tuple(a.format(d=door, x=own, folder=self.folder, **self.ids) for a in args)


def ok(done: Done) -> Done:
    assert done.returncode == 0, (done.args, done.stdout, done.stderr)
    return done


def set_up(home: Path, folder: Path) -> dict[str, str]:
    """What the reads read, made on the server's machine as its admin would: two experiments, a
    group, a datastore and a dataset, a quota, a secret, a user in a project."""
    env = {"PHALANX_HOME": str(home)}
    shutil.copytree(DATA / "remote", folder / "code")
    (folder / "code" / "trial.py").write_text(TRIAL)
    (folder / "code" / "group.yml").write_text(GROUP)
    (folder / "code" / "model.py").write_text(MODEL)
    (folder / "code" / "model.yml").write_text(
        "version: 1\nkind: experiment\nproject: remote-tests\nrun:\n  cmd: python model.py\n"
    )
    exp = str(folder / "code" / "exp.yml")
    ids = {}
    for name, lr in (("a", "0.1"), ("b", "0.2"), ("c", "0.3"), ("e", "0.4")):
        done = ok(phalanx_cli("run", "-f", exp, "--param", f"lr={lr}", "-o", "json", env=env))
        ids[name] = json.loads(done.stdout)["id"]
    for name, file in (("g", "group.yml"), ("m", "model.yml")):
        done = ok(phalanx_cli("run", "-f", str(folder / "code" / file), "-o", "json", env=env))
        ids[name] = json.loads(done.stdout)["id"]
    (folder / "lake" / "digits").mkdir(parents=True)
    (folder / "lake" / "digits" / "part-0.csv").write_text("x,y\n1,2\n")
    for args in (
        ("datastore", "add", "lake", str(folder / "lake"), "--shared"),
        ("data", "add", "digits", "lake:digits", "--shared"),
        ("admin", "project", "add", "vision"),
        ("quota", "set", "vision", "--cores", "2", "--max-waiting", "3"),
        ("models", "register", ids["m"], "--name", "tiny", "--alias", "prod"),
        ("cluster", "add", "hpc", "--kind", "slurm", "--partition", "debug"),
        ("cluster", "map", "hpc", "vision", "--account", "vision-lab"),
    ):
        ok(phalanx_cli(*args, env=env))
    ok(phalanx_cli("admin", "user", "add", "vic", "--password-stdin", env=env, input="vic-password-1\n"))
    ok(phalanx_cli("admin", "member", "add", "vision", "vic", "--role", "editor", env=env))
    ok(phalanx_cli("secret", "set", "vision", "API_KEY", env=env, input="s3cr3t\n"))
    return ids


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Doors]:
    root = tmp_path_factory.mktemp("door-contract")
    home = root / "home"
    ids = set_up(home, root)
    with running_server(home, token=TOKEN, args=TRUSTING) as server:
        yield Doors(home, server.url, root / "laptop", ids, root)


# Reads: the same bytes on stdout through both doors ({a}, {b}, {g}: the setup's ids).
READS: dict[str, list[tuple[str, ...]]] = {
    "ls": [("ls",), ("ls", "-o", "json"), ("ls", "--project", "remote-tests", "--where", "param:lr > 0.15")],
    "get": [("get", "{a}"), ("get", "{a}", "-o", "json"), ("get", "{a}", "--file")],
    "metrics": [("metrics", "{a}"), ("metrics", "{a}", "-o", "json"), ("metrics", "{a}", "-o", "csv")],
    "params": [("params", "{a}", "-o", "json")],
    "artifacts": [("artifacts", "{a}"), ("artifacts", "{a}", "-o", "json")],
    "logs": [("logs", "{a}"), ("logs", "{a}", "-o", "json")],
    "diff": [("diff", "{a}", "{b}"), ("diff", "{a}", "{b}", "-o", "json")],
    "reports": [("reports", "{a}")],
    "checkpoints": [("checkpoints", "{a}"), ("checkpoints", "{a}", "-o", "json")],
    "group ls": [("group", "ls"), ("group", "ls", "-o", "json")],
    "group get": [("group", "get", "{g}"), ("group", "get", "{g}", "-o", "json")],
    "datastore ls": [("datastore", "ls"), ("datastore", "ls", "-o", "json")],
    "data ls": [("data", "ls"), ("data", "ls", "-o", "json")],
    "data get": [("data", "get", "digits@1", "-o", "json")],
    "quota ls": [("quota", "ls"), ("quota", "ls", "-o", "json")],
    "secret ls": [("secret", "ls", "vision"), ("secret", "ls", "vision", "-o", "json")],
    "queue": [("queue",), ("queue", "-o", "json")],
    "models ls": [("models", "ls"), ("models", "ls", "-o", "json"), ("models", "{m}", "-o", "json")],
    "models get": [("models", "get", "tiny"), ("models", "get", "tiny@prod", "-o", "json")],
    "cluster ls": [("cluster", "ls"), ("cluster", "ls", "-o", "json")],
    "cluster maps": [("cluster", "maps"), ("cluster", "maps", "-o", "json"), ("cluster", "maps", "hpc")],
    "admin audit": [("admin", "audit", "--limit", "5", "-o", "json"), ("admin", "audit", "--json")],
    "admin user ls": [("admin", "user", "ls"), ("admin", "user", "ls", "-o", "json")],
    "admin project ls": [("admin", "project", "ls"), ("admin", "project", "ls", "-o", "json")],
}

# Writes, in order: each door acts on a name of its own ({d}: "here" or "there"); the answers must
# be the same but for that name (tables: a write's JSON holds the time it was made, and the reads
# above compare the JSON of what the writes leave).
WRITES: list[tuple[str, tuple[str, ...], str]] = [
    ("tag", ("tag", "{x}", "{d}-best"), ""),
    ("note", ("note", "{x}", "tried {d}", "--append"), ""),
    ("admin project add", ("admin", "project", "add", "p-{d}"), ""),
    ("admin user add", ("admin", "user", "add", "u-{d}", "--password-stdin"), "a-long-password-1\n"),
    ("admin member add", ("admin", "member", "add", "p-{d}", "u-{d}", "--role", "editor"), ""),
    ("admin member rm", ("admin", "member", "rm", "p-{d}", "u-{d}"), ""),
    ("admin user disable", ("admin", "user", "disable", "u-{d}"), ""),
    ("admin user enable", ("admin", "user", "enable", "u-{d}"), ""),
    ("quota set", ("quota", "set", "p-{d}", "--cores", "1"), ""),
    ("quota rm", ("quota", "rm", "p-{d}"), ""),
    ("secret set", ("secret", "set", "p-{d}", "API_TOKEN"), "value\n"),
    ("secret rm", ("secret", "rm", "p-{d}", "API_TOKEN"), ""),
    ("datastore add", ("datastore", "add", "store-{d}", "{folder}/lake"), ""),
    ("data add", ("data", "add", "set-{d}", "store-{d}:digits"), ""),
    ("data rm", ("data", "rm", "set-{d}", "--yes"), ""),
    ("datastore rm", ("datastore", "rm", "store-{d}"), ""),
    ("models register", ("models", "register", "{m}", "--name", "m-{d}"), ""),
    ("models alias", ("models", "alias", "m-{d}@prod", "1"), ""),
    ("cluster add", ("cluster", "add", "c-{d}", "--kind", "slurm", "--partition", "part-{d}"), ""),
    ("cluster map", ("cluster", "map", "c-{d}", "p-{d}", "--account", "acct-{d}"), ""),
    ("cluster unmap", ("cluster", "unmap", "c-{d}", "p-{d}"), ""),
    ("cluster rm", ("cluster", "rm", "c-{d}"), ""),
    ("models update", ("models", "update", "m-{d}@1", "--description", "tiny {d}", "--tag", "door={d}"), ""),
    ("models register", ("models", "register", "{m}", "--name", "m-{d}", "--alias", "next"), ""),
    ("models rm", ("models", "rm", "m-{d}@2", "--yes"), ""),
]

# Commands of both doors that start or follow processes, proved on both doors by another test of
# this folder: (its file, the test, which must run the command).
ELSEWHERE = {
    "run": (
        "test_remote_commands.py",
        "test_login_makes_the_server_the_default_and_local_keeps_this_machine",
    ),
    "rerun": ("test_door_launch.py", "test_run_and_rerun_print_one_json_document_on_both_doors"),
    "resume": (
        "test_remote_commands.py",
        "test_login_makes_the_server_the_default_and_local_keeps_this_machine",
    ),
    "stop": (
        "test_remote_commands.py",
        "test_every_read_and_control_command_prints_on_the_server_what_it_prints_there",
    ),
    "delete": (
        "test_remote_commands.py",
        "test_every_read_and_control_command_prints_on_the_server_what_it_prints_there",
    ),
    "plot": (
        "test_remote_commands.py",
        "test_every_read_and_control_command_prints_on_the_server_what_it_prints_there",
    ),
    "group run": ("test_remote_commands.py", "test_group_get_and_stop_on_the_server"),
    "group stop": ("test_remote_commands.py", "test_group_get_and_stop_on_the_server"),
    "group delete": ("test_remote_commands.py", "test_group_get_and_stop_on_the_server"),
    "models download": (
        "test_door_run.py",
        "test_register_model_registers_on_the_server_and_models_ls_shows_it",
    ),
    "serve": ("test_door_serve.py", "test_serve_after_login_serves_and_follows_the_servers_model"),
    "notebook start": (
        "test_notebook_service.py",
        "test_a_projects_notebook_runs_a_cell_over_the_proxy_with_its_input",
    ),
    "tensorboard start": (
        "test_services.py",
        "test_a_groups_tensorboard_answers_its_projects_members_through_the_server_only",
    ),
}


# how a test starts a command that it does not spell out word by word (a helper of its folder)
STARTED_BY = {"serve": re.escape("start_serve(")}


def _as_here(text: str, url: str) -> str:
    """An answer with the server it names put as this machine's answer names it: a table may say
    which machine it describes (`queue`: "server URL:" or "this machine:"; `quota set`: "on local
    at URL"; `secret set`: "experiments on URL")."""
    text = text.replace(f"server {url}", "this machine").replace(f" at {url}", "")
    return text.replace(f"on {url}", "on this machine")


def _cases() -> list[tuple[str, tuple[str, ...]]]:
    return [(command, args) for command, cases in READS.items() for args in cases]


@pytest.mark.parametrize(("command", "args"), _cases(), ids=[" ".join(a) for _, a in _cases()])
def test_a_read_prints_the_same_through_both_doors(doors: Doors, command: str, args: tuple[str, ...]) -> None:
    words = doors.fill(args)
    here, there = ok(doors.here(*words)), ok(doors.there(*words))
    assert _as_here(there.stdout, doors.url) == here.stdout, words
    assert here.stdout.strip(), words  # a read of what the setup made says something
    assert there.stderr == f"phalanx: on server {doors.url}\n" and here.stderr == "phalanx: on this machine\n"


def test_a_write_through_either_door_answers_the_same_and_lands_in_the_one_store(doors: Doors) -> None:
    for command, args, stdin in WRITES:
        here = ok(doors.here(*doors.fill(args, "here"), input=stdin.replace("{d}", "here")))
        there = ok(doors.there(*doors.fill(args, "there"), input=stdin.replace("{d}", "there")))
        assert _as_here(there.stdout, doors.url).replace("there", "here") == here.stdout, command
    # both doors wrote into the server's store: the server's machine reads each door's writes
    users = {u["name"]: u for u in json.loads(ok(doors.here("admin", "user", "ls", "-o", "json")).stdout)}
    assert users["u-here"]["disabled"] is users["u-there"]["disabled"] is False
    projects = json.loads(ok(doors.here("admin", "project", "ls", "-o", "json")).stdout)
    assert projects["p-here"] == projects["p-there"] == {}  # each door's member came and went
    assert ok(doors.here("tag", doors.ids["b"])).stdout == "there-best\n"
    assert ok(doors.here("note", doors.ids["b"])).stdout == "tried there\n"
    clusters = [c["name"] for c in json.loads(ok(doors.here("cluster", "ls", "-o", "json")).stdout)]
    assert clusters == ["hpc"]  # each door's cluster came and went
    models = {m["name"]: m for m in json.loads(ok(doors.here("models", "ls", "-o", "json")).stdout)}
    assert models["m-here"]["aliases"] == models["m-there"]["aliases"] == {"prod": 1}  # @next went with 2
    assert [
        v["version"] for v in json.loads(ok(doors.here("models", "ls", "m-there", "-o", "json")).stdout)
    ] == [1]
    stores = {s["name"] for s in json.loads(ok(doors.here("datastore", "ls", "-o", "json")).stdout)}
    assert stores == {"lake"}


def test_deleting_through_either_door_answers_the_same(doors: Doors) -> None:
    here = ok(doors.here("delete", doors.ids["c"], "--yes", "-o", "json"))
    there = ok(doors.there("delete", doors.ids["e"], "--yes", "-o", "json"))
    assert json.loads(here.stdout) == {"deleted": [doors.ids["c"]]}
    assert json.loads(there.stdout) == {"deleted": [doors.ids["e"]]}
    listed = {e["id"] for e in json.loads(ok(doors.here("ls", "-o", "json")).stdout)}
    assert not listed & {doors.ids["c"], doors.ids["e"]}


def _test_source(file: str, test: str) -> str:
    """The source of ``test`` in ``file`` (empty: no such test)."""
    text = (Path(__file__).parent / file).read_text()
    found = (n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == test)
    return next((ast.get_source_segment(text, n) or "" for n in found), "")


def test_every_command_of_both_doors_is_held_to_the_contract() -> None:
    both = {name for name, door in DOORS.items() if door == BOTH}
    here = set(READS) | {command for command, _, _ in WRITES}
    assert not here & set(ELSEWHERE), here & set(ELSEWHERE)
    missing = both - here - set(ELSEWHERE)
    assert not missing, f"commands of both doors no test holds to the contract: {sorted(missing)}"
    assert not (here | set(ELSEWHERE)) - both, "a command listed here does not act on both doors"
    for command, (file, test) in ELSEWHERE.items():
        source = _test_source(file, test)
        assert source, f"`phalanx {command}`: {file} has no {test}"
        said = STARTED_BY.get(command) or r",\s*".join(f'"{w}"' for w in command.split())
        assert re.search(said, source), f"{file}::{test} does not run `phalanx {command}`"
