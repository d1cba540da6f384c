"""An experiment's inputs over the API, and a Kubernetes pod's fetch-inputs step run for real against
a real `phalanx server`: the files of the experiment's dataset version arrive checked and read-only,
nothing outside the version is served, and a file changed at its source fails the step (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.integration.server.serverproc import start_server, stop_server

from phalanx.backends.kube_inputs import FETCH_INPUTS, inputs_url
from phalanx.config import Settings

TOKEN = "inputs-api-token-0123456789"


def _get(url: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=60) as r:
        return json.load(r)


def test_a_pod_fetches_its_dataset_input_through_the_server_checked(tmp_path: Path) -> None:
    from phalanx.data.inputs import resolve
    from phalanx.spec.inputs import InputSpec
    from phalanx.store import catalog, open_store

    home = tmp_path / "server"
    home.mkdir()
    source = tmp_path / "digits"
    (source / "train").mkdir(parents=True)
    (source / "labels.txt").write_text("0\n1\n")
    (source / "train" / "a.csv").write_text("1,2\n" * 100)
    (tmp_path / "secret.txt").write_text("not a dataset file")
    settings = Settings(home=home)
    store = open_store(settings)
    catalog.add_dataset(store, "digits", str(source))
    orders: list[dict[str, Any]] = []
    _, records = resolve([InputSpec("digits", dataset="digits@1")], settings, orders=orders)
    exp = store.create_experiment(name="k8s", project="p", plan={"inputs": records})
    store.close()

    server = start_server(home, token=TOKEN)
    try:
        api = f"{server.url}/api/v1"
        shown = _get(f"{api}/experiments/{exp.id}/inputs")
        assert [(i["name"], i["ref"], i["fetched"]) for i in shown] == [
            ("digits", "digits@1", "on each node")
        ]
        version = _get(f"{api}/datasets/digits/versions/1")
        assert sorted(f["path"] for f in version["manifest"]) == ["labels.txt", "train/a.csv"]

        pod = tmp_path / "pod"
        argv = [
            sys.executable,
            "-c",
            FETCH_INPUTS,
            inputs_url(server.url, exp.id),
            str(pod),
            json.dumps(orders),
        ]
        env = {"PATH": os.environ["PATH"], "PHALANX_TOKEN": TOKEN}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        folder = pod / orders[0]["key"]
        assert (folder / "train" / "a.csv").read_text() == "1,2\n" * 100
        assert (folder / "labels.txt").stat().st_mode & 0o222 == 0  # read-only

        # only what the version holds is served
        for path in ("..%2Fsecret.txt", "secret.txt"):
            try:
                _get(f"{api}/experiments/{exp.id}/inputs/digits/files/{path}")
                raise AssertionError(f"{path} was served")
            except urllib.error.HTTPError as exc:
                assert exc.code in (400, 404), exc.code

        (source / "labels.txt").write_text("0\n2\n")  # changed after the version was recorded
        again = subprocess.run(
            [*argv[:4], str(tmp_path / "pod2"), argv[5]], env=env, capture_output=True, text=True, timeout=120
        )
        assert again.returncode == 2 and "'labels.txt' changed since the version was recorded" in again.stderr
    finally:
        stop_server(server.proc)
