"""`phalanx ls / get / metrics / params / artifacts / delete` as a user (or a script, with -o json)
runs them, on an experiment a real script reported into. The commands run in this process
(tests/support/cli.py); `phalanx --version` runs the `phalanx` script itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import Done, phalanx_cli

PHALANX = Path(sys.executable).parent / "phalanx"


class Cli:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
        self.env["PHALANX_HOME"] = str(home)

    def __call__(self, *args: str, ok: bool = True) -> Done:
        unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PHALANX_")}
        done = phalanx_cli(*args, env={**unset, "PHALANX_HOME": str(self.home)})
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    def json(self, *args: str) -> object:
        return json.loads(self(*args, "-o", "json").stdout)


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str]]:
    """One experiment, reported by a script whose ingester is disabled, so the CLI's own ingest
    pass is what brings the data in."""
    base = tmp_path_factory.mktemp("cli")
    cli = Cli(base / "home")
    script = base / "report.py"
    script.write_text(
        textwrap.dedent(
            """
            import argparse
            from phalanx import Task
            p = argparse.ArgumentParser(); p.add_argument("--lr", type=float, default=0.1); p.parse_args()
            task = Task.init("cli", "reported")
            for i in range(50):
                task.get_logger().report_scalar("loss", "worker 00", 1.0 / (i + 1), i)
                task.get_logger().report_scalar("loss", "worker 01", 2.0 / (i + 1), i)
                task.get_logger().report_scalar("acc", "worker 00", i / 50, i)
            task.connect({"worker_0_stuff": "some stuff 7"})
            task.upload_artifact("temp 00", artifact_object={"worker_rank": 0})
            print("hello")
            """
        )
    )
    env = {**cli.env, "PYTHONUNBUFFERED": "1"}
    # -S: no site-packages, so no detached ingester can start; the spool waits for the CLI
    src = Path(__file__).resolve().parents[3] / "src"
    env["PYTHONPATH"] = str(src)
    subprocess.run([sys.executable, "-S", str(script)], env=env, check=True, timeout=180, cwd=base)
    [exp] = cli.json("ls")  # type: ignore[misc]
    yield cli, exp["id"]


def test_ls_lists_the_experiment(reported: tuple[Cli, str]) -> None:
    cli, exp_id = reported
    [exp] = cli.json("ls")  # type: ignore[misc]
    assert (exp["id"], exp["name"], exp["project"], exp["status"]) == (exp_id, "reported", "cli", "succeeded")
    table = cli("ls").stdout
    assert exp_id in table and "succeeded" in table
    assert cli.json("ls", "--status", "failed") == []
    bad = cli("ls", "--status", "nope", ok=False)
    assert bad.returncode == 2 and "use one of" in bad.stderr and "Traceback" not in bad.stderr


def test_get_shows_replicas_params_artifacts_and_metrics(reported: tuple[Cli, str]) -> None:
    cli, exp_id = reported
    doc = cli.json("get", exp_id[:5])
    assert isinstance(doc, dict)
    assert doc["status"] == "succeeded" and doc["finished_at"] >= doc["started_at"]
    assert [(r["name"], r["state"]) for r in doc["replicas"]] == [("master", "succeeded")]
    assert doc["params"] == {"Args": {"lr": 0.1}, "General": {"worker_0_stuff": "some stuff 7"}}
    assert [a["name"] for a in doc["artifacts"]] == ["temp 00"]
    assert doc["metrics"] == {"acc": ["worker 00"], "loss": ["worker 00", "worker 01"]}
    text = cli("get", exp_id).stdout
    assert "worker_0_stuff = some stuff 7" in text and "loss: worker 00, worker 01" in text


def test_metrics_json_has_the_documented_shape(reported: tuple[Cli, str]) -> None:
    cli, exp_id = reported
    doc = cli.json("metrics", exp_id, "--title", "loss")
    assert isinstance(doc, dict) and list(doc) == ["loss"]
    assert sorted(doc["loss"]) == ["worker 00", "worker 01"]
    assert sorted(doc["loss"]["worker 00"]) == ["steps", "values"]
    assert doc["loss"]["worker 01"]["steps"] == list(range(50))
    assert doc["loss"]["worker 01"]["values"][1] == 1.0
    rows = cli("metrics", exp_id, "-o", "csv").stdout.splitlines()
    assert rows[0] == "title,series,step,value,time" and len(rows) == 151
    missing = cli("metrics", exp_id, "--title", "nope", ok=False)
    assert missing.returncode == 2 and "titles: acc, loss" in missing.stderr


def test_params_and_artifacts_with_download(reported: tuple[Cli, str], tmp_path: Path) -> None:
    cli, exp_id = reported
    assert cli.json("params", exp_id) == {"Args": {"lr": 0.1}, "General": {"worker_0_stuff": "some stuff 7"}}
    [artifact] = cli.json("artifacts", exp_id)  # type: ignore[misc]
    assert (artifact["name"], artifact["kind"], artifact["rank"]) == ("temp 00", "json", 0)
    out = cli("artifacts", exp_id, "--download", "temp 00", "-d", str(tmp_path)).stdout.strip()
    assert json.loads(Path(out).read_text()) == {"worker_rank": 0}
    missing = cli("artifacts", exp_id, "--download", "nope", ok=False)
    assert missing.returncode == 2 and "'temp 00'" in missing.stderr


def test_unknown_and_ambiguous_ids_are_usage_errors(reported: tuple[Cli, str]) -> None:
    cli, _ = reported
    for args in (("get", "ffffffffffff"), ("metrics", "zz"), ("params", "")):
        done = cli(*args, ok=False)
        assert done.returncode == 2 and done.stderr.startswith("error:") and "Traceback" not in done.stderr


def test_delete_asks_for_confirmation_then_removes_everything(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    from phalanx.config import Settings
    from phalanx.store import open_store

    store = open_store(Settings(home=cli.home, db_url=None, artifacts_url=None))
    exp = store.create_experiment(name="doomed", project="p").id
    assert store.artifact_store is not None
    store.artifact_store.put_bytes(exp, "artifacts/x.json", b"{}")
    refused = cli("delete", exp, ok=False)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert cli.json("delete", exp, "--yes") == {"deleted": [exp]}
    assert cli.json("ls") == []
    assert not store.artifact_store.exists(exp, "artifacts/x.json")


def test_delete_takes_several_ids_all_or_nothing_and_refuses_a_short_prefix(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    from phalanx.config import Settings
    from phalanx.store import open_store

    store = open_store(Settings(home=cli.home, db_url=None, artifacts_url=None))
    # ids of distinct first characters: a random pair sharing two would make the short prefix
    # ambiguous, an answer that comes before the length's
    a, b, c = (store.create_experiment(name=n, project="p", experiment_id=n * 12).id for n in "abc")
    short = cli("delete", a[:2], "--yes", ok=False)
    assert short.returncode == 2 and "at least 8 characters" in short.stderr and a in short.stderr
    typo = cli("delete", a, b, "0123456789ab", "--yes", ok=False)
    assert typo.returncode == 2 and "Traceback" not in typo.stderr
    assert {e["id"] for e in cli.json("ls")} == {a, b, c}  # nothing deleted
    assert cli.json("delete", a, b[:8], "--yes") == {"deleted": [a, b]}
    assert [e["id"] for e in cli.json("ls")] == [c]


def test_ls_filters_by_tag_and_removing_a_tag_that_is_not_there_says_so(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    from phalanx.config import Settings
    from phalanx.store import open_store

    store = open_store(Settings(home=cli.home, db_url=None, artifacts_url=None))
    a, b = (store.create_experiment(name=n, project="p").id for n in "ab")
    cli("tag", a, "baseline", "fast")
    assert [e["id"] for e in cli.json("ls", "--tag", "baseline")] == [a]
    assert "no experiments match; `phalanx ls` without --tag" in cli("ls", "--tag", "nope").stdout
    typo = cli("tag", a, "--remove", "basline", ok=False)
    assert typo.returncode == 2 and "Traceback" not in typo.stderr
    assert "has no tag 'basline'; did you mean 'baseline'?" in typo.stderr
    assert cli("tag", a).stdout.split() == ["baseline", "fast"]  # nothing changed
    cli("tag", a, "--remove", "fast")
    assert cli("tag", a).stdout.split() == ["baseline"]
    assert b not in {e["id"] for e in cli.json("ls", "--tag", "baseline")}


def test_version_flag_prints_the_version(tmp_path: Path) -> None:
    from phalanx import __version__

    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    done = subprocess.run(
        [str(PHALANX), "--version"],
        env={**env, "PHALANX_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"phalanx {__version__}"
