"""One door: a mistake typed against a server is told as this machine tells it (the same words,
exit status 2, no traceback), and an option that means nothing different there is taken.

What these guard against: an empty id named the list route (`GET /experiments/`), whose page the
CLI read as an experiment (a KeyError traceback, exit 1); a write to an empty name was answered
with a trailing-slash redirect (`the server answered 307`, exit 1); an id holding `/` matched no
route (the bare `error: Not Found`); a missing group was `group X does not exist` on a server and
`no group 'X'; ...` here; and `phalanx run -d`, which a script types on this machine, was refused
after a login although a server run is detached anyway.

The server is the real app on a real loopback socket (``served``), the CLI runs in-process."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from phalanx.config import Settings
from phalanx.store import catalog, open_store, quotas, secrets
from phalanx.store.accounts import Accounts, Role
from phalanx.store.base import Store
from tests.support.cli import phalanx_cli
from tests.unit.cli.conftest import TOKEN, Served

SPEC = "version: 1\nkind: experiment\nrun:\n  cmd: python -c pass\n"
NAMES = "use letters, digits, '.', '_' and '-' (at most 128, not starting with '.', '_' or '-')"


def both(served: Served, *args: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """(exit status, stderr) of ``args`` on this machine and on the server."""
    here = phalanx_cli(*args, "--local")
    there = phalanx_cli(*args, "--server", served.url, env={"PHALANX_TOKEN": TOKEN})
    for done in (here, there):
        assert "Traceback" not in done.stderr, (args, done.stderr)
    return (here.returncode, _said(here.stderr)), (there.returncode, _said(there.stderr))


def _said(stderr: str) -> str:
    """The words, less the door line and the door a hint's command repeats (`phalanx ls --local`,
    `phalanx ls --server URL`: tests/unit/cli/test_door_hints.py)."""
    said = "\n".join(line for line in stderr.splitlines() if not line.startswith("phalanx: on "))
    return re.sub(r" (?:--local|--server \S+?)`", "`", said)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("get", ""), "error: an experiment id is required"),
        (("logs", "  "), "error: an experiment id is required"),
        (("metrics", ""), "error: an experiment id is required"),
        (("tag", ""), "error: an experiment id is required"),
        (("get", "a/b"), "error: no experiment 'a/b'; `phalanx ls` lists them"),
        (("params", "../x"), "error: no experiment '../x'; `phalanx ls` lists them"),
        (("group", "get", ""), "error: no group ''; `phalanx group ls` lists them"),
        (("group", "get", "nosuch"), "error: no group 'nosuch'; `phalanx group ls` lists them"),
        (("group", "stop", "a/b"), "error: no group 'a/b'; `phalanx group ls` lists them"),
        (("rerun", ""), "error: an experiment id is required"),
        (("quota", "rm", ""), "error: a project name is required"),
        (("quota", "set", " ", "--cores", "1"), "error: a project name is required"),
        (("data", "ls", ""), f"error: dataset name '': {NAMES}"),
        (("datastore", "rm", ""), f"error: datastore name '': {NAMES}"),
        (("datastore", "rm", "a/b"), f"error: datastore name 'a/b': {NAMES}"),
    ],
)
def test_a_bad_id_is_told_the_same_on_both_doors(
    served: Served, phalanx_home: Path, args: tuple[str, ...], said: str
) -> None:
    here, there = both(served, *args)
    assert here == (2, said), here
    assert there == (2, said), there


def test_an_empty_name_in_a_write_to_a_server_is_a_usage_error_not_a_redirect(
    served: Served, phalanx_home: Path
) -> None:
    done = phalanx_cli(
        "secret", "set", "vision", "", "--server", served.url, env={"PHALANX_TOKEN": TOKEN}, input="v\n"
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "307" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "error: an empty argument where PUT /api/v1/projects/vision/secrets/ needs a name or id:"
        " give a non-empty one"
    )


def test_run_detach_on_a_server_prints_the_id_as_it_does_here(
    served: Served, phalanx_home: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "exp" / "exp.yml"
    spec.parent.mkdir()
    spec.write_text(SPEC)
    env = {"PHALANX_TOKEN": TOKEN}
    done = phalanx_cli("run", "-f", spec, "--detach", "--server", served.url, env=env)
    assert done.returncode == 0, done.stderr
    exp_id = done.stdout.strip()
    assert served.store.get_experiment(exp_id).id == exp_id
    both_ways = phalanx_cli("run", "-f", spec, "-d", "--follow", "--server", served.url, env=env)
    assert both_ways.returncode == 2 and both_ways.stderr.splitlines()[-1] == (
        "error: --detach and --follow: give one (a server run is detached unless --follow)"
    )


def test_a_user_added_without_a_terminal_is_told_to_pipe_the_password_on_both_doors(
    served: Served, phalanx_home: Path
) -> None:
    here, there = both(served, "admin", "user", "add", "ada")  # no terminal, no --password-stdin
    said = (
        "error: no terminal to ask ada's password on: pipe it in with --password-stdin"
        " (`phalanx admin user add ada --password-stdin < password.txt`, its first line)"
    )
    assert here == (2, said) and there == (2, said), (here, there)
    here, there = both(served, "admin", "user", "add", "", "--password-stdin")
    assert here[0] == there[0] == 2 and here[1] == there[1], (here, there)
    assert here[1].startswith("error: invalid user name ''"), here


def test_a_param_the_file_does_not_declare_is_kept_with_extra_params_on_a_server(
    served: Served, phalanx_home: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "exp" / "exp.yml"
    spec.parent.mkdir()
    spec.write_text("version: 1\nkind: experiment\ndeclarations:\n  lr: 0.1\nrun:\n  cmd: python -c pass\n")
    env = {"PHALANX_TOKEN": TOKEN}
    refused = phalanx_cli("run", "-f", spec, "--param", "lrr=0.5", "--server", served.url, env=env)
    assert refused.returncode == 2 and "did you mean 'lr'?" in refused.stderr, refused.stderr
    assert "--extra-params" in refused.stderr and "Traceback" not in refused.stderr
    kept = phalanx_cli(
        "run", "-f", spec, "--param", "lrr=0.5", "--extra-params", "--server", served.url, env=env
    )
    assert kept.returncode == 0, kept.stderr
    exp = served.store.get_experiment(kept.stdout.strip())
    assert exp.plan["params"]["lrr"] == 0.5, exp.plan


GROUP = """version: 1
kind: group
hptuning:
  concurrency: 1
  matrix:
    x: {values: [1, 2]}
run:
  cmd: python -c pass {{ x }}
"""


def test_group_run_after_a_login_submits_the_group_to_the_server(
    served: Served, phalanx_home: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "sweep" / "group.yml"
    spec.parent.mkdir()
    spec.write_text(GROUP)
    env = {"PHALANX_TOKEN": TOKEN}
    done = phalanx_cli("group", "run", "-f", spec, "--detach", "--server", served.url, env=env)
    assert done.returncode == 0, done.stderr
    group = served.store.get_group(done.stdout.strip())
    assert group.planned == 2 and f"phalanx: on server {served.url}" in done.stderr
    refused = phalanx_cli("group", "run", "-f", spec, "--workdir", tmp_path, "--server", served.url, env=env)
    assert refused.returncode == 2 and "--workdir: not available on a server yet" in refused.stderr


def test_group_run_of_an_experiment_file_is_refused_on_both_doors(
    served: Served, phalanx_home: Path, tmp_path: Path
) -> None:
    # here `group run` refuses a file that is no group (exit 2); on a server it must not submit and
    # run it as an experiment (the server's submit takes either kind)
    spec = tmp_path / "exp.yaml"
    spec.write_text(SPEC)
    (here_rc, here), (there_rc, there) = both(served, "group", "run", "-f", str(spec), "-d")
    assert here_rc == there_rc == 2, (here, there)
    assert "is not a valid group file" in there, there


# -- a project a team server does not know ---------------------------------------------------------
# On a team server projects are records (`phalanx admin project add`, a server admin's): a secret,
# quota, datastore or dataset naming one with no record (a typo) was accepted, exit 0, and nobody's;
# so was a server admin's run into one; `secret rm` and `quota rm` of one said it had no such secret
# or quota (and a non-member's `secret rm` was told so too, the server's 404 swallowed).

UNKNOWN = (
    "error: no project 'visoin' on this server; did you mean 'vision'? (a server admin creates it with"
    " `phalanx admin project add visoin`; `phalanx admin project ls` lists them)"
)


def _not_theirs(project: str, near: str = "", fix: str = "") -> str:
    """What ada (a member of vision only) is told of a project she is in none of the roles of."""
    fix = fix or "a project's admin adds members: `phalanx admin member add PROJECT USER`"
    return (
        f"error: project '{project}' does not exist or you are not a member of it{near}"
        f" (your projects: vision; {fix})"
    )


def _team(store: Store) -> Accounts:
    """``store`` made a team server's: an admin (whom the server token acts as), projects vision and
    nlp, and ada, an admin of vision only."""
    accounts = Accounts(store)
    accounts.add_user("root", None, admin=True)
    for project in ("vision", "nlp"):
        accounts.add_project(project)
    accounts.add_user("ada", None)
    accounts.set_member("vision", "ada", Role.admin)
    return accounts


def _writes(data: Path, project: str) -> list[tuple[tuple[str, ...], str]]:
    """The writes naming ``project``: (arguments, stdin)."""
    return [
        (("secret", "set", project, "API_KEY"), "v\n"),
        (("quota", "set", project, "--cores", "1"), ""),
        (("datastore", "add", "lake", str(data), "--project", project), ""),
        (("data", "add", "digits", str(data), "--project", project), ""),
    ]


def _removes(project: str) -> list[tuple[tuple[str, ...], str]]:
    """The removals naming ``project``: (arguments, stdin)."""
    return [(("secret", "rm", project, "API_KEY"), ""), (("quota", "rm", project), "")]


def _spec(tmp_path: Path, project: str | None, text: str = SPEC) -> Path:
    """``text`` (an experiment or group file) in a folder of its own, in ``project`` (None: none
    named, so `default`)."""
    folder = tmp_path / f"in-{project}"
    folder.mkdir(exist_ok=True)
    spec = folder / ("group.yml" if "kind: group" in text else "exp.yml")
    spec.write_text(text if project is None else text.replace("kind:", f"project: {project}\nkind:", 1))
    return spec


def _nothing_written(store: Store) -> None:
    assert secrets.names(store) == [] and quotas.list_quotas(store) == []
    assert catalog.list_datastores(store) == [] and catalog.list_datasets(store) == []


def test_a_write_naming_a_project_a_team_server_does_not_know_is_refused_on_both_doors(
    served: Served, phalanx_home: Path, tmp_path: Path
) -> None:
    here_store = open_store(Settings())
    for store in (served.store, here_store):  # the server's, and this machine's as a server's store
        _team(store)
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    for args, stdin in _writes(data, "visoin") + _removes("visoin"):
        here = phalanx_cli(*args, "--local", input=stdin)
        there = phalanx_cli(*args, "--server", served.url, env={"PHALANX_TOKEN": TOKEN}, input=stdin)
        for done in (here, there):
            assert (done.returncode, _said(done.stderr)) == (2, UNKNOWN), (args, done.stderr)
    for store in (served.store, here_store):
        _nothing_written(store)
    here_store.close()
    for path in ("quota", "secrets/API_KEY"):  # the API's answer: 404, in the same words
        r = httpx.delete(
            f"{served.url}/api/v1/projects/visoin/{path}", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert (r.status_code, r.json()["message"]) == (404, UNKNOWN.removeprefix("error: ")), r.text
    for args, said in zip(  # a project it knows: no such secret or quota, the same words on both doors
        (args for args, _ in _removes("vision")),
        (
            "error: project vision has no secret API_KEY (`phalanx secret ls vision`)",
            "error: project vision has no quota on local (`phalanx quota ls` lists them)",
        ),
        strict=True,
    ):
        assert both(served, *args) == ((2, said), (2, said)), args


def test_a_member_is_told_of_an_unknown_project_as_of_anothers_with_only_their_own_projects_near(
    served: Served, phalanx_home: Path, tmp_path: Path
) -> None:
    accounts = _team(served.store)
    env = {"PHALANX_TOKEN": accounts.issue_token("ada", "test", None)[0]}
    data = tmp_path / "data"
    data.mkdir()
    writes = (_writes(data, project) + _removes(project)[:1] for project in ("visoin", "nlp"))
    for unknown, anothers in zip(*writes, strict=True):
        (args, stdin), (other_args, _) = unknown, anothers
        refused = phalanx_cli(*args, "--server", served.url, env=env, input=stdin)
        other = phalanx_cli(*other_args, "--server", served.url, env=env, input=stdin)
        said, other_said = _said(refused.stderr), _said(other.stderr)
        assert (refused.returncode, other.returncode) == (2, 2), (refused.stderr, other.stderr)
        assert said == _not_theirs("visoin", "; did you mean 'vision'?"), said
        # nlp exists, ada is not in it: the same words, and never another's project as the near one
        assert other_said == _not_theirs("nlp")
    args, stdin = _writes(data, "default")[0]  # no file here: no word of one
    done = phalanx_cli(*args, "--server", served.url, env=env, input=stdin)
    assert (done.returncode, _said(done.stderr)) == (2, _not_theirs("default")), done.stderr
    for project in ("visoin", "nlp", "vision"):  # a quota is a server admin's, whichever project
        done = phalanx_cli("quota", "rm", project, "--server", served.url, env=env)
        assert (done.returncode, _said(done.stderr)) == (2, "error: ada is not a server admin"), done.stderr
    _nothing_written(served.store)


def test_a_run_into_a_project_a_team_server_does_not_know_is_refused_as_a_write_is(
    served: Served, phalanx_home: Path, tmp_path: Path
) -> None:
    accounts = _team(served.store)
    root = {"PHALANX_TOKEN": TOKEN}
    ada = {"PHALANX_TOKEN": accounts.issue_token("ada", "test", None)[0]}
    for command, text in ((("run",), SPEC), (("group", "run"), GROUP)):
        for project, env, said in (
            ("visoin", root, UNKNOWN),  # a server admin's typo
            ("visoin", ada, _not_theirs("visoin", "; did you mean 'vision'?")),
            ("nlp", ada, _not_theirs("nlp")),  # another's project: the same words
            # a file that names none runs in `default`: each is told the way forward
            (None, root, UNKNOWN.replace("visoin", "default").replace("; did you mean 'vision'?", "")[:-1]
             + "; or name a project in the file (`project: NAME`))"),
            (None, ada, _not_theirs("default", fix="a file that names no `project:` runs in 'default': "
                                    "name one of yours in it")),
        ):  # fmt: skip
            done = phalanx_cli(
                *command, "-f", _spec(tmp_path, project, text), "-d", "--server", served.url, env=env
            )
            assert (done.returncode, _said(done.stderr).splitlines()[-1]) == (2, said), done.stderr
    assert served.store.list_experiments().total == 0 and served.store.list_groups() == []
    for env in (root, ada):  # a project it knows, by a server admin and by a member
        done = phalanx_cli("run", "-f", _spec(tmp_path, "vision"), "-d", "--server", served.url, env=env)
        assert done.returncode == 0, done.stderr


def test_projects_are_labels_without_teams_and_one_holding_experiments_counts(
    served: Served, phalanx_home: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    env = {"PHALANX_TOKEN": TOKEN}
    for args, stdin in _writes(data, "visoin")[:2]:  # a single-user machine, a single-token server
        assert phalanx_cli(*args, "--local", input=stdin).returncode == 0
        assert phalanx_cli(*args, "--server", served.url, env=env, input=stdin).returncode == 0
    run = ("run", "-f", _spec(tmp_path, None), "-d", "--server", served.url)
    assert phalanx_cli(*run, env=env).returncode == 0  # into `default`, a label
    here_store = open_store(Settings())
    for store in (served.store, here_store):  # team servers' stores now
        _team(store)
    # `default` has no record but holds a run from before the teams: it counts
    assert phalanx_cli(*run, env=env).returncode == 0
    done = phalanx_cli("quota", "set", "default", "--gpus", "1", "--server", served.url, env=env)
    assert done.returncode == 0, done.stderr
    # what was set while visoin was a label is still removed, on both doors; then it is not known
    for args, _ in _removes("visoin"):
        here, there = phalanx_cli(*args, "--local"), phalanx_cli(*args, "--server", served.url, env=env)
        assert (here.returncode, there.returncode) == (0, 0), (here.stderr, there.stderr)
        assert both(served, *args) == ((2, UNKNOWN), (2, UNKNOWN)), args
    here_store.close()
