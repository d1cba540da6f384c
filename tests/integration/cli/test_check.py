"""`phalanx check` as a user runs it: exit statuses, stdout and stderr. The command runs in this
process (tests/support/cli.py); the first test runs the `phalanx` script itself, once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import CORPUS, REPO
from tests.support.cli import Done, phalanx_cli

FIXTURES = REPO / "tests" / "unit" / "spec" / "fixtures"
GOLDEN = REPO / "tests" / "golden" / "check"
PHALANX = Path(sys.executable).parent / "phalanx"


def check(*args: str | Path, cwd: Path = REPO) -> Done:
    return phalanx_cli("check", *args, cwd=cwd)


def test_json_output_is_exactly_one_document_with_the_documented_shape() -> None:
    """The `phalanx` script itself (its entry point, start-up and exit), once; the others in-process."""
    done = subprocess.run(
        [str(PHALANX), "check", "-f", str(FIXTURES / "seed002_tensorflow_large.yml"), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == check("-f", FIXTURES / "seed002_tensorflow_large.yml", "-o", "json").stdout
    doc = json.loads(done.stdout)  # the whole of stdout is one JSON document
    assert doc["framework"] == "tensorflow"
    assert doc["backend"] is None
    assert doc["command"] == "python -u run.py --train-steps=400 --sync"
    replicas = {r["name"]: r for r in doc["replicas"]}
    assert [r["role"] for r in doc["replicas"]] == ["master"] + ["worker"] * 7 + ["ps"] * 3
    assert {k: replicas["worker-2"][k] for k in ("name", "role", "index", "rank", "resources")} == {
        "name": "worker-2",
        "role": "worker",
        "index": 2,
        "rank": 3,
        "resources": {
            "cpu": {"requests": 1, "limits": 2},
            "memory": {"requests": 256, "limits": 1024},
            "gpu": {"requests": None, "limits": None},
        },
    }
    assert replicas["ps-0"]["rank"] is None
    assert replicas["ps-0"]["resources"]["memory"] == {"requests": 512, "limits": 512}


@pytest.mark.parametrize(
    "name", ["seed000_pytorch_large.yml", "seed001_mxnet_section.yml", "seed002_tensorflow_large.yml"]
)
def test_json_output_matches_the_golden_file(name: str) -> None:
    done = check("-f", FIXTURES / name, "-o", "json")
    assert done.returncode == 0, done.stderr
    golden = GOLDEN / name.replace(".yml", ".json")
    if os.environ.get("PHALANX_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(done.stdout)
    assert json.loads(done.stdout) == json.loads(golden.read_text())


def test_table_output_lists_every_replica_for_people() -> None:
    done = check("-f", FIXTURES / "seed002_tensorflow_large.yml")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "replicas: 1 master, 7 workers, 3 ps" in out
    rows = {
        line.split()[0]: line for line in out.splitlines() if line.startswith(("master", "worker-", "ps-"))
    }
    assert len(rows) == 11
    assert rows["worker-2"].split("│")[4:7] == [" 1 / 2 ", " 256 / 1024   ", " -     "]
    assert "command: python -u run.py --train-steps=400 --sync" in out


def test_mxnet_table_names_the_scheduler_and_servers() -> None:
    out = check("-f", FIXTURES / "seed001_mxnet_section.yml").stdout
    assert "master (scheduler)" in out and "ps (server)" in out


def test_param_overrides_fill_the_command() -> None:
    corpus = CORPUS / "polyaxonfiles" / "pytorch__mnist__polyaxonfile.yml"
    done = check("-f", corpus, "--param", "lr=0.5", "--param", "epochs=1", "-o", "json")
    assert done.returncode == 0, done.stderr
    command = json.loads(done.stdout)["command"]
    assert "--lr=0.5" in command and "--epochs=1" in command and "--batch-size=128" in command


def test_an_invalid_file_prints_every_problem_to_stderr_and_nothing_to_stdout() -> None:
    done = check("-f", FIXTURES / "seed001_tensorflow_large_request_typo.yml", "-o", "json")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].endswith(
        "seed001_tensorflow_large_request_typo.yml:14:7: environment.resources.gpu.request: "
        "unknown key; did you mean 'requests'? (allowed here: requests, limits)"
    )
    assert ":30:11: environment.tensorflow.default_worker.resources.gpu.request: unknown key" in lines[1]
    assert lines[2].startswith("error: ") and lines[2].endswith("is not a valid experiment file (2 problems)")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-f", "no-such-file.yml"], "error: no-such-file.yml: no such file\n"),
        (["-f", "."], "is a directory"),
        (
            ["-f", FIXTURES / "seed000_pytorch_master.yml", "--param", "oops"],
            "--param 'oops': expected NAME=VALUE",
        ),
        (["-f", FIXTURES / "seed000_pytorch_master.yml", "-o", "xml"], "xml"),
        ([], "-f"),
    ],
)
def test_usage_mistakes_exit_2_without_a_traceback(args: list[str | Path], words: str) -> None:
    done = check(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert words in done.stderr
    assert "Traceback" not in done.stderr


def test_notes_about_ignored_polyaxon_keys_go_to_stderr_not_into_the_json(tmp_path: Path) -> None:
    f = tmp_path / "polyaxonfile.yml"
    f.write_text("version: 1\nkind: experiment\nlogging: {level: INFO}\nrun: {cmd: python x.py}\n")
    done = check("-f", f, "-o", "json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["replicas"][0]["name"] == "master"
    assert (
        "note: " in done.stderr and "logging: accepted for Polyaxon compatibility and ignored" in done.stderr
    )
