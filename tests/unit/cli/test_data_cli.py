"""`phalanx data get --dir` and `phalanx data rm` on both doors (this machine, and a server on a
loopback socket, the CLI in-process): a refused fetch leaves nothing at the destination, `data rm`
asks first (or, with no terminal, wants --yes) and says how many experiments read what it removes,
and a missing version is answered with the versions that exist."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from phalanx.cli.data import _confirm_rm
from phalanx.config import Settings
from phalanx.data.remote import RemoteCatalog
from phalanx.errors import NotFound, UsageError
from phalanx.store import open_store
from phalanx.store.base import Store
from phalanx.store.catalog import DatasetVersion
from phalanx.store.dataset_reads import versions_text
from tests.support.cli import Done, phalanx_cli
from tests.unit.cli.conftest import TOKEN, Served

Door = Callable[..., Done]


@pytest.fixture(params=["here", "server"])
def door(request: pytest.FixtureRequest, phalanx_home: Path) -> tuple[Door, Callable[[], Store]]:
    """The CLI on one door, and that door's store (to record experiments that read a version)."""
    if request.param == "here":
        return (lambda *args, **kw: phalanx_cli(*args, "--local", **kw)), lambda: open_store(Settings())
    served: Served = request.getfixturevalue("served")

    def there(*args: str | Path, **kw: str) -> Done:
        return phalanx_cli(*args, "--server", served.url, env={"PHALANX_TOKEN": TOKEN}, **kw)

    return there, lambda: served.store


@pytest.fixture
def digits(tmp_path: Path) -> Path:
    data = tmp_path / "digits"
    (data / "train").mkdir(parents=True)
    (data / "labels.txt").write_text("0\n1\n")  # copied first: the changed file below is the last
    (data / "train" / "x.csv").write_text("1,2,3\n")
    return data


def _ok(done: Done) -> Done:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_refused_fetch_leaves_nothing_at_the_destination(
    door: tuple[Door, Callable[[], Store]], digits: Path, tmp_path: Path
) -> None:
    cli, _ = door
    _ok(cli("data", "add", "huge", str(digits), "--reference"))
    (digits / "train" / "x.csv").write_text("changed\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept").mkdir()
    (out / "kept" / "labels.txt").write_text("mine\n")
    before = _listing(out)
    for dest in (out / "h2", out / "deep" / "er" / "h3", out / "kept"):
        done = cli("data", "get", "huge@1", "-d", str(dest))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "file 'train/x.csv' changed since the version was recorded" in done.stderr
        assert _listing(out) == before, dest  # no folder made, no partial copy, no hidden leftover
    assert (out / "kept" / "labels.txt").read_text() == "mine\n"
    (digits / "train" / "x.csv").write_text("1,2,3\n")  # as recorded: the fetch goes through
    _ok(cli("data", "get", "huge@1", "-d", str(out / "kept")))  # into the folder, as before
    assert _listing(out / "kept") == ["labels.txt", "train", "train/x.csv"]
    assert (out / "kept" / "labels.txt").read_text() == "0\n1\n"
    _ok(cli("data", "get", "huge@1", "-d", str(out / "deep" / "er" / "h3")))
    assert _listing(out / "deep") == ["er", "er/h3", "er/h3/labels.txt", "er/h3/train", "er/h3/train/x.csv"]
    (out / "file").write_text("")
    (out / "blocked" / "train" / "x.csv").mkdir(parents=True)  # a folder where a file goes
    for dest, said in ((out / "file", "not a folder"), (out / "blocked", "is a folder there")):
        done = cli("data", "get", "huge@1", "-d", str(dest))
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert _listing(out / "blocked") == ["train", "train/x.csv"]


def test_data_rm_asks_first_and_says_who_read_it(
    door: tuple[Door, Callable[[], Store]], digits: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli, store = door
    for n in (1, 2, 3):
        (digits / "labels.txt").write_text(f"{n}\n")
        _ok(cli("data", "add", "digits", str(digits)))
    read = {"name": "d", "kind": "dataset", "dataset": "digits", "version": 2, "ref": "digits@2"}
    for i in range(2):
        store().create_experiment(name=f"train-{i}", project="p", plan={"inputs": [read]})
    store().create_experiment(
        name="other", project="p", plan={"inputs": [{**read, "dataset": "digitz", "ref": "digitz@2"}]}
    )

    done = cli("data", "rm", "digits@2")  # stdin is no terminal: --yes, or nothing happens
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "error: removing digits@2 (2 experiments read it: their reruns will no longer find it)"
        " needs confirmation: pass --yes"
    )
    done = cli("data", "rm", "digits")
    assert done.returncode == 2 and "removing dataset digits and its 3 versions (2 experiments" in done.stderr
    assert [v["version"] for v in json.loads(_ok(cli("data", "ls", "digits", "-o", "json")).stdout)] == [
        1,
        2,
        3,
    ]

    with monkeypatch.context() as patched:
        patched.setattr("phalanx.cli.app.on_terminal", lambda: True)  # on a terminal: asked
        done = cli("data", "rm", "digits@2", input="n\n")
        assert done.returncode == 1 and "nothing removed" in done.stderr, done.stderr
        assert "Remove digits@2? 2 experiments read it" in done.stdout and "digits@2 (2 files" in done.stdout
        _ok(cli("data", "rm", "digits@2", input="y\n"))

    done = cli("data", "get", "digits@2")
    assert done.returncode == 2 and "has no version 2" in done.stderr and "(versions: 1, 3)" in done.stderr
    done = cli("data", "rm", "digits@1")
    assert "removing digits@1 (no experiment read it)" in done.stderr, done.stderr
    assert _ok(cli("data", "rm", "digits", "--yes")).stdout == "removed digits@1, digits@3\n"
    assert json.loads(_ok(cli("data", "ls", "-o", "json")).stdout) == []


@pytest.mark.parametrize(
    ("versions", "said"),
    [
        ([3], "3"),
        ([1, 3], "1, 3"),
        ([2, 1], "1, 2"),
        ([1, 2, 3], "1-3"),
        ([9, 1, 2, 3, 4, 5, 7, 10, 11, 12], "1-5, 7, 9-12"),
    ],
)
def test_versions_are_listed_as_they_exist(versions: list[int], said: str) -> None:
    assert versions_text(versions) == said


def test_data_rm_on_a_server_without_the_readers_route_asks_without_a_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server older than this client answers 404 to `GET /datasets/NAME/readers`: `data rm` still
    asks (or wants --yes), saying it cannot tell who read the version, not 'no such dataset'."""

    class OlderServer:
        def get(self, path: str, **params: str) -> Any:
            raise NotFound("Not Found")

    assert RemoteCatalog(OlderServer()).readers("digits", [1]) is None  # type: ignore[arg-type]
    monkeypatch.setattr("phalanx.cli.app.on_terminal", lambda: False)
    version = DatasetVersion("digits", 1, "x", "file:///d", False, (), 0, 0.0)
    with pytest.raises(UsageError) as refused:
        _confirm_rm("digits@1", [version], None)
    assert refused.value.message == (
        "removing digits@1 (the server cannot tell which experiments read it) needs confirmation: pass --yes"
    )
