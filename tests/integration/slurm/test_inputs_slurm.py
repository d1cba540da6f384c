"""Data inputs on the two-node Slurm cluster: a dataset version on the loopback S3 server is fetched
by each node into its own cache (GETs counted at the server: once per node, though each node runs two
replicas), every replica reads it from there, and the submitting machine downloads nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tests.integration.s3.conftest import shared_server
from tests.support import s3
from tests.support.slurm import LocalSlurm

from phalanx.clusters import add_cluster
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(300)]

FILES = {"train/a.csv": "1,2\n" * 50, "labels.txt": "0\n1\n"}

SPEC = """
version: 1
kind: experiment
framework: pytorch
environment:
  replicas:
    n_workers: 3
env:
  AWS_ENDPOINT_URL: {endpoint}
  AWS_SHARED_CREDENTIALS_FILE: {credentials}
  AWS_DEFAULT_REGION: us-east-1
inputs:
  - name: digits
    dataset: digits@latest
run:
  cmd: >-
    echo "node=$SLURMD_NODENAME path={{{{ inputs.digits }}}}
    labels=$(tr '\\n' , <{{{{ inputs.digits }}}}/labels.txt)"
"""


def test_each_node_fetches_a_dataset_input_once_into_its_own_cache(
    slurm_cluster: LocalSlurm, phalanx_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if s3.unavailable_reason():
        pytest.skip(str(s3.unavailable_reason()))
    import fsspec

    from phalanx.runner import LaunchOptions, Runner
    from phalanx.spec.loader import load_spec_text
    from phalanx.store import catalog, open_store

    server = shared_server()
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    bucket = server.create_bucket()
    fs = fsspec.filesystem("s3", skip_instance_cache=True)  # no cached client for other tests
    for rel, text in FILES.items():
        fs.pipe_file(f"{bucket}/digits/{rel}", text.encode())
    # the nodes read S3 with their own credentials: a file they can read (never the job script)
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(
        "[default]\n"
        f"aws_access_key_id = {s3.CREDENTIALS['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {s3.CREDENTIALS['AWS_SECRET_ACCESS_KEY']}\n"
    )
    credentials.chmod(0o600)
    node_cache = slurm_cluster.dir / f"node-cache-{tmp_path.name}" / "%n"
    monkeypatch.setenv("PHALANX_NODE_CACHE", str(node_cache))

    settings = Settings()
    add_cluster(slurm_cluster.cluster(), phalanx_home)
    store = open_store(settings)
    version, _ = catalog.add_dataset(store, "digits", f"s3://{bucket}/digits")
    before = server.count("GET", f"/{bucket}/digits/")
    text = SPEC.format(endpoint=server.endpoint, credentials=credentials)
    spec = load_spec_text(textwrap.dedent(text))
    options = LaunchOptions(cluster=slurm_cluster.name, workdir=tmp_path)
    outcome = Runner(settings).run(spec, options, handle_signals=False, store=store)
    lines = [t.text for t in store.logs(outcome.experiment_id)]
    assert outcome.status is ExperimentStatus.SUCCEEDED, f"{outcome.reason}\n{lines}"
    said = sorted(line for line in lines if line.startswith("node="))
    paths = {n: str(node_cache).replace("%n", n) + "/" + version.digest for n in ("n1", "n2")}
    assert said == sorted(
        [f"node=n1 path={paths['n1']} labels=0,1,"] * 2 + [f"node=n2 path={paths['n2']} labels=0,1,"] * 2
    ), lines
    # two replicas on each node, one fetch per node (the cache's lock), nothing on this machine
    assert server.count("GET", f"/{bucket}/digits/") - before == 2 * len(FILES)
    assert not (phalanx_home / "cache" / "data" / version.digest).exists()
    script = (slurm_cluster.dir / "shared" / "runs" / outcome.experiment_id / "job.sbatch").read_text()
    assert s3.CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in script
    record = store.get_experiment(outcome.experiment_id).plan["inputs"][0]
    assert (record["ref"], record["fetched"]) == (version.ref, "on each node")
    assert slurm_cluster.wait_queue_empty() == []
