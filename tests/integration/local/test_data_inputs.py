"""Data in, on the local engine: seed 004's `script_params={'--data_dir': ds}` with a datastore holding
the digits data, a file's `inputs:` section, and the mistakes refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.estimator.conftest import stop_group

from phalanx import Experiment, PyTorch
from phalanx.config import Settings
from phalanx.data import Datastore

from .conftest import Phalanx

READER = """
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--data_dir")
args = parser.parse_args()
rows = open(os.path.join(args.data_dir, "digits.csv")).read().splitlines()
print(f"rank {os.environ['RANK']} read {len(rows)} rows from {args.data_dir}", flush=True)
"""


def _digits_store(phalanx: Phalanx) -> Path:
    from sklearn.datasets import load_digits

    folder = phalanx.tmp / "lake"
    folder.mkdir()
    x, y = load_digits(return_X_y=True)
    rows = [",".join(str(int(v)) for v in (*xs, label)) for xs, label in zip(x, y, strict=True)]
    (folder / "digits.csv").write_text("\n".join(rows) + "\n")
    return folder


def test_seed_004_datastore_as_a_script_param_reaches_every_replica(phalanx: Phalanx) -> None:
    lake = _digits_store(phalanx)
    added = phalanx.run("datastore", "add", "digits-store", str(lake))
    assert added.returncode == 0, added.stderr
    source = phalanx.tmp / "project"
    source.mkdir()
    (source / "train.py").write_text(READER)
    settings = Settings(home=phalanx.home)
    ds = Datastore.get(settings, "digits-store")  # seed 004: ds = Datastore.get(ws, name)
    est = PyTorch(
        source_directory=source,
        entry_script="train.py",
        script_params={"--data_dir": ds},
        node_count=2,
        distributed_backend="gloo",
    )
    run = Experiment("seed-004", project="data", settings=settings).submit(est)
    try:
        assert run.wait_for_completion(timeout=300)["status"] == "succeeded"
    finally:
        if run._process is not None:
            stop_group(run._process)
    lines = [line.text for line in phalanx.store().logs(run.id)]
    for rank in (0, 1):
        assert f"rank {rank} read 1797 rows from {lake}" in lines, lines
    shown = json.loads(phalanx.cli("get", run.id, "-o", "json").stdout)
    assert [(i["kind"], i["datastore"], i["url"]) for i in shown["inputs"]] == [
        ("datastore", "digits-store", str(lake))
    ]


def test_a_missing_dataset_or_datastore_stops_the_run_before_anything_starts(phalanx: Phalanx) -> None:
    for inputs, fix in (
        ("[{name: d, dataset: digits@3}]", "phalanx data add digits PATH"),
        ("[{name: d, datastore: nowhere}]", "phalanx datastore add nowhere URL"),
    ):
        text = f"version: 1\nkind: experiment\ninputs: {inputs}\nrun:\n  cmd: echo {{{{ inputs.d }}}}\n"
        result = phalanx.cli("run", "-f", str(phalanx.spec(text)))  # refused: in this process
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and fix in result.stderr, result.stderr
    assert phalanx.store().list_experiments().items == []  # nothing recorded, nothing started


def test_a_changed_referenced_file_is_refused_and_a_kept_version_runs_whatever_its_source_does(
    phalanx: Phalanx,
) -> None:
    data = phalanx.tmp / "data"
    data.mkdir()
    (data / "a.txt").write_text("one\n")
    assert phalanx.run("data", "add", "tiny", str(data), "--reference").returncode == 0
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        inputs:
          - {name: tiny, dataset: tiny@1, mode: mount}
        run:
          cmd: cat {{ inputs.tiny }}/a.txt
        """
    )
    (data / "a.txt").write_text("two\n")  # changed after tiny@1 was recorded
    refused = phalanx.cli("run", "-f", str(spec))  # refused: in this process
    assert refused.returncode == 2 and "'a.txt' changed since the version was recorded" in refused.stderr
    assert phalanx.store().list_experiments().items == []
    added = phalanx.cli("data", "add", "tiny", str(data), "--json")  # (the first `data add` is real)
    assert (json.loads(added.stdout)["ref"], json.loads(added.stdout)["bytes"]) == ("tiny@2", "copied")
    (data / "a.txt").write_text("three\n")  # the source changes again: tiny@2 is the catalog's copy
    ok = phalanx.cli("run", "-f", str(spec), "--param", "unused=1", "--extra-params")
    assert ok.returncode == 2  # tiny@1 is pinned in the file: still refused
    spec.write_text(spec.read_text().replace("tiny@1", "tiny@latest"))
    ran = phalanx.run("run", "-f", str(spec))
    assert ran.returncode == 0, ran.stderr
    assert "two" in ran.stdout and "three" not in ran.stdout
