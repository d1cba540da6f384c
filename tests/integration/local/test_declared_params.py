"""An experiment file's params (after --param) are the experiment's params, though the script never
reports any: `phalanx params`, `ls --where param:...` and search_experiments see them (issue 40)."""

from __future__ import annotations

import json

import pytest

import phalanx as sdk  # the Python door (the fixture is named phalanx)

from .conftest import Phalanx


def test_a_files_params_after_param_are_shown_and_filtered(
    phalanx: Phalanx, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = phalanx.spec(
        """
        version: 1
        kind: experiment
        params: {lr: 0.1, epochs: 2}
        run:
          cmd: python train.py --lr {{ lr }}
        """
    )
    (spec.parent / "train.py").write_text("import sys\nprint('lr', sys.argv[sys.argv.index('--lr') + 1])\n")
    done = phalanx.run("run", "-f", str(spec), "--param", "lr=0.5")
    assert done.returncode == 0, done.stderr
    # `ls` and `params` as processes of their own (their real-process smoke); the filters in this process
    (exp,) = json.loads(phalanx.run("ls", "-o", "json").stdout)
    params = phalanx.run("params", exp["id"], "-o", "json")
    assert json.loads(params.stdout) == {"Declared": {"lr": 0.5, "epochs": 2}}, params.stdout + params.stderr
    kept = phalanx.cli("ls", "--where", "param:lr >= 0.5 and param:epochs in (2, 3)", "-o", "json")
    assert [e["id"] for e in json.loads(kept.stdout)] == [exp["id"]], kept.stderr
    assert json.loads(phalanx.cli("ls", "--where", "param:lr < 0.5", "-o", "json").stdout) == []
    monkeypatch.setenv("PHALANX_HOME", str(phalanx.home))
    frame = sdk.search_experiments("param:lr >= 0.5", columns=["param:lr"], local=True)
    assert list(frame["id"]) == [exp["id"]] and list(frame["param:lr"]) == [0.5]
