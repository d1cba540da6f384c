"""Data on the server's door: from a laptop's own home, logged in to a real `phalanx server` on
loopback, `phalanx datastore add` and `phalanx data add` register on the server (`--local` keeps
the laptop's), `data ls` lists them there, a viewer reads but cannot add, another project's editor
neither sees nor reads them, and seed 004's ``Datastore.get``/``Dataset.get`` answer the server's
records (its version number, not the laptop's). Project secrets take the same door: set and removed
by the project's admins, their names listed to its editors, never a value answered. One server for
the module; the commands run in this process (tests/support/cli.py)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.integration.server.serverproc import Server, start_server, stop_server
from tests.integration.server.test_remote_commands import ok, phalanx
from tests.integration.server.test_teams_audit import admin, token_of

from phalanx.config import Settings
from phalanx.data import Dataset, Datastore
from phalanx.estimators import Experiment, PyTorch
from phalanx.store import open_store, secrets


@dataclass
class Team:
    server: Server
    lake: Path  # a folder on the server's machine (this one)
    laptops: dict[str, Path]  # user -> a laptop home logged in as that user


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    root = tmp_path_factory.mktemp("door-data")
    home = root / "server"
    home.mkdir()
    admin(home, "user", "add", "root", "--admin", "--password-stdin", stdin="root-password\n")
    for user, project, role in (
        ("ada", "nlp", "editor"),
        ("vic", "nlp", "viewer"),
        ("bob", "vision", "editor"),
    ):
        if user != "vic":  # vic joins ada's project
            admin(home, "project", "add", project)
        admin(home, "user", "add", user, "--password-stdin", stdin=f"{user}-password\n")
        admin(home, "member", "add", project, user, "--role", role)
    lake = root / "lake"
    (lake / "digits").mkdir(parents=True)
    (lake / "digits" / "train.csv").write_text("1,2\n" * 10)
    server = start_server(home)
    try:
        laptops = {}
        for user in ("root", "ada", "vic", "bob"):
            laptops[user] = root / f"laptop-{user}"
            ok(
                phalanx(
                    laptops[user], "login", server.url, "--token", token_of(server, user, f"{user}-password")
                )
            )
        yield Team(server, lake, laptops)
    finally:
        stop_server(server.proc)


def test_datastore_and_data_add_register_on_the_server(team: Team) -> None:
    ada, root = team.laptops["ada"], team.laptops["root"]
    # a folder of the server's machine is an admin's to register (an editor could name the server's files)
    r = phalanx(ada, "datastore", "add", "lake", str(team.lake), "--project", "nlp")
    assert r.returncode == 2 and "server admin" in r.stderr, r.stderr
    r = ok(phalanx(root, "datastore", "add", "lake", str(team.lake), "--project", "nlp", "-o", "json"))
    assert r.stderr == f"phalanx: on server {team.server.url}\n"
    assert json.loads(r.stdout)["project"] == "nlp"
    r = ok(phalanx(ada, "data", "add", "digits", "lake:digits", "--project", "nlp", "-o", "json"))
    added = json.loads(r.stdout)
    assert (added["ref"], added["files"], added["new"], added["bytes"]) == ("digits@1", 1, True, "copied")

    listed = json.loads(ok(phalanx(ada, "data", "ls", "-o", "json")).stdout)
    assert [v["ref"] for v in listed] == ["digits@1"]
    assert json.loads(ok(phalanx(ada, "datastore", "ls", "-o", "json")).stdout)[0]["url"] == str(team.lake)
    assert json.loads(ok(phalanx(ada, "data", "get", "digits", "-o", "json")).stdout)["manifest"][0][
        "path"
    ] == ("train.csv")
    copy = team.lake.parent / "copy"
    ok(phalanx(ada, "data", "get", "digits@1", "--dir", str(copy)))  # through the API, checked
    assert (copy / "train.csv").read_text() == "1,2\n" * 10
    # the laptop's own store holds none of it
    r = ok(phalanx(ada, "data", "ls", "-o", "json", "--local"))
    assert json.loads(r.stdout) == [] and r.stderr == "phalanx: on this machine\n"

    # a viewer reads, and cannot add
    vic = team.laptops["vic"]
    assert [v["ref"] for v in json.loads(ok(phalanx(vic, "data", "ls", "-o", "json")).stdout)] == ["digits@1"]
    r = phalanx(vic, "data", "add", "digits", "lake:digits", "--project", "nlp")
    assert r.returncode == 2 and "viewer" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = phalanx(vic, "datastore", "rm", "lake")
    assert r.returncode == 2 and "viewer" in r.stderr, r.stderr

    # another project's editor neither sees nor reads them
    bob = team.laptops["bob"]
    assert json.loads(ok(phalanx(bob, "data", "ls", "-o", "json")).stdout) == []
    assert json.loads(ok(phalanx(bob, "datastore", "ls", "-o", "json")).stdout) == []
    r = phalanx(bob, "data", "get", "digits@1")
    assert r.returncode == 2 and "no dataset 'digits'" in r.stderr, r.stderr
    r = phalanx(bob, "data", "add", "mine", "lake:digits", "--project", "vision")
    assert r.returncode == 2 and "no datastore 'lake'" in r.stderr, r.stderr
    r = phalanx(bob, "data", "get", "digits@1", "--dir", str(team.lake.parent / "bobs"))
    assert r.returncode == 2 and "no dataset 'digits'" in r.stderr, r.stderr

    # digits@1 is the server's copy: a change at its source leaves it whole
    (team.lake / "digits" / "train.csv").write_text("9,9\n")
    ok(phalanx(ada, "data", "get", "digits@1", "--dir", str(team.lake.parent / "copy2")))
    assert (team.lake.parent / "copy2" / "train.csv").read_text() == "1,2\n" * 10
    # a version that references its source instead: a file changed since is refused, nothing half-kept
    ok(phalanx(ada, "data", "add", "digits-ref", "lake:digits", "--project", "nlp", "--reference"))
    (team.lake / "digits" / "train.csv").write_text("8,8\n")
    r = phalanx(ada, "data", "get", "digits-ref@1", "--dir", str(team.lake.parent / "copy3"))
    assert r.returncode == 2 and "changed since the version was recorded" in r.stderr, r.stderr
    assert not (team.lake.parent / "copy3" / "train.csv").exists()


def test_seed_004s_handles_resolve_through_the_server(team: Team) -> None:
    ada = team.laptops["ada"]
    ok(phalanx(team.laptops["root"], "datastore", "add", "shelf", str(team.lake), "--project", "nlp"))
    ok(phalanx(ada, "data", "add", "shelf-digits", "shelf:digits", "--project", "nlp"))
    # the laptop's own catalog has a look-alike with other versions
    for rows in (1, 2, 3):
        (team.lake / "digits" / "train.csv").write_text("3,4\n" * rows)
        ok(phalanx(ada, "data", "add", "shelf-digits", str(team.lake / "digits"), "--local"))
    # -o json: the same document on both doors
    there = json.loads(ok(phalanx(ada, "data", "get", "shelf-digits@1", "-o", "json")).stdout)
    here = json.loads(ok(phalanx(ada, "data", "get", "shelf-digits@1", "-o", "json", "--local")).stdout)
    assert list(there) == list(here) and there["digest"] != here["digest"]
    assert there["project"] == "nlp" and here["project"] is None
    assert Dataset.get(str(ada), "shelf-digits@latest").version == 1  # logged in: the server's
    assert Dataset.get(Settings(home=ada), "shelf-digits").version == 1
    assert Datastore.get(str(ada), "shelf").url == str(team.lake)
    on_server = Experiment("seed", "nlp", settings=Settings(home=ada), server=team.server.url)
    assert Dataset.get(on_server, "shelf-digits@latest").as_input().dataset == "shelf-digits@1"
    assert Datastore.get(on_server, "shelf").path("digits").as_input().datastore == "shelf"
    # what submit() sends: the server's datastore and version (seed 004's script_params)
    est = PyTorch(
        source_directory=str(team.lake),
        entry_script="digits/train.csv",  # any file of the folder: nothing runs
        script_params={
            "--data_dir": Datastore.get(on_server, "shelf"),
            "--labels": Dataset.get(on_server, "shelf-digits"),
        },
    )
    sent = est.to_yaml(name="seed", project="nlp")
    assert "dataset: shelf-digits@1" in sent and "datastore: shelf" in sent, sent
    local = Experiment("seed", "nlp", settings=Settings(home=ada))  # submits on this machine: its data
    assert Dataset.get(local, "shelf-digits@latest").version == 3
    with pytest.raises(Exception, match="no dataset 'shelf-digits'"):
        Dataset.get(
            Experiment("seed", "vision", settings=Settings(home=team.laptops["bob"]), server=team.server.url),
            "shelf-digits",
        )


def test_secrets_are_set_listed_and_removed_on_the_server_and_never_answered(team: Team) -> None:
    root, ada, vic = team.laptops["root"], team.laptops["ada"], team.laptops["vic"]
    value = "hf-Zq9vKx-unmistakable"
    r = ok(phalanx(root, "secret", "set", "nlp", "HF_TOKEN", stdin=value + "\n"))
    assert r.stderr == f"phalanx: on server {team.server.url}\n"
    assert "project nlp: secret HF_TOKEN set" in r.stdout and value not in r.stdout
    held = Settings(home=team.server.home)
    with contextlib.closing(open_store(held)) as store:  # sealed in the server's store, as set
        assert secrets.environment(store, held.home, "nlp") == {"HF_TOKEN": value}
    assert json.loads(ok(phalanx(root, "secret", "ls", "--local", "-o", "json")).stdout) == []

    listed = ok(phalanx(ada, "secret", "ls", "nlp", "-o", "json"))  # an editor lists names
    assert [(s["project"], s["name"]) for s in json.loads(listed.stdout)] == [("nlp", "HF_TOKEN")]
    assert value not in listed.stdout + listed.stderr
    r = phalanx(ada, "secret", "set", "nlp", "HF_TOKEN", stdin="replaced\n")  # not an admin of nlp
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    r = phalanx(vic, "secret", "ls", "nlp")  # a viewer does not even see the names
    assert r.returncode == 2 and "HF_TOKEN" not in r.stdout, r.stdout
    r = phalanx(ada, "secret", "ls")
    assert r.returncode == 2 and "name the project: `phalanx secret ls PROJECT`" in r.stderr, r.stderr
    r = phalanx(root, "secret", "set", "nlp", "lower_case", stdin="v\n")
    assert r.returncode == 2 and "an environment variable name in capitals" in r.stderr, r.stderr

    ok(phalanx(root, "secret", "rm", "nlp", "HF_TOKEN"))
    r = phalanx(root, "secret", "rm", "nlp", "HF_TOKEN")
    assert r.returncode == 2 and "project nlp has no secret HF_TOKEN" in r.stderr, r.stderr
    assert json.loads(ok(phalanx(ada, "secret", "ls", "nlp", "-o", "json")).stdout) == []


def test_a_projects_roles_are_given_from_a_laptop_and_the_servers_trail_says_who(team: Team) -> None:
    root, ada = team.laptops["root"], team.laptops["ada"]
    r = phalanx(ada, "admin", "member", "add", "nlp", "bob", "--role", "viewer")  # an editor, not an admin
    assert r.returncode == 2 and r.stderr.startswith(f"phalanx: on server {team.server.url}\n"), r.stderr
    r = ok(phalanx(root, "admin", "member", "add", "nlp", "bob", "--role", "viewer"))
    assert r.stdout == "bob is now viewer of project nlp\n"
    on_server = json.loads(ok(phalanx(team.server.home, "admin", "project", "ls", "--json")).stdout)
    assert on_server["nlp"]["bob"] == "viewer"
    ok(phalanx(root, "admin", "member", "rm", "nlp", "bob"))
    on_server = json.loads(ok(phalanx(team.server.home, "admin", "project", "ls", "--json")).stdout)
    assert "bob" not in on_server["nlp"]
    trail = json.loads(ok(phalanx(root, "admin", "audit", "--project", "nlp", "--json")).stdout)
    done = [(e["actor"], e["action"], e["target"], e["detail"]) for e in trail if e["target"] == "nlp/bob"]
    assert done[-2:] == [
        ("root", "member.set", "nlp/bob", "viewer"),
        ("root", "member.remove", "nlp/bob", "previous: viewer"),
    ]
    assert phalanx(ada, "admin", "audit").returncode == 2  # the trail is the server admins'
    # the server's users are its admins' to list, from a laptop too; --local lists the laptop's own
    r = ok(phalanx(root, "admin", "user", "ls", "--json"))
    assert r.stderr == f"phalanx: on server {team.server.url}\n"
    assert {"root", "ada"} <= {u["name"] for u in json.loads(r.stdout)}
    r = phalanx(ada, "admin", "user", "ls")  # a project's editor is no server admin
    assert r.returncode == 2 and "admin" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = ok(phalanx(root, "admin", "user", "ls", "--json", "--local"))
    assert r.stderr == "phalanx: on this machine\n" and json.loads(r.stdout) == []
