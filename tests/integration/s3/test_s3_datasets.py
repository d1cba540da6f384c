"""A dataset version on an S3 API used by 2-replica experiments in download mode: fetched once for
both replicas (GETs counted at the server), reused by the next experiment, fetched once when two
experiments start at the same moment; `phalanx diff` names the dataset versions of two runs, and
`phalanx rerun --latest-data` reads the latest version where the original pinned an older one."""

from __future__ import annotations

import json

from tests.integration.local.conftest import Phalanx
from tests.support import s3

FILES = {"train/a.csv": "1,2\n" * 100, "train/b.csv": "3,4\n" * 100, "labels.txt": "0\n1\n"}

SPEC = """
version: 1
kind: experiment
framework: pytorch
environment:
  replicas:
    n_workers: 1
inputs:
  - name: digits
    dataset: REF
    mode: download
run:
  cmd: cat {{ inputs.digits }}/labels.txt && ls {{ inputs.digits }}/train
"""


def _upload(s3_url: str, prefix: str, files: dict[str, str]) -> str:
    import fsspec

    fs, root = fsspec.core.url_to_fs(s3_url)
    for rel, text in files.items():
        fs.pipe_file(f"{root}/{prefix}/{rel}", text.encode())
    return f"{s3_url}/{prefix}"


def _gets(server: s3.S3Server, prefix: str) -> int:
    return server.count("GET", f"/{prefix}/")


def test_a_dataset_on_s3_is_fetched_once_per_machine(
    phalanx_s3: Phalanx, s3_url: str, s3_server: s3.S3Server
) -> None:
    source = _upload(s3_url, "raw/digits-v1", FILES)
    added = phalanx_s3.cli("data", "add", "digits", source, "--json")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["ref"] == "digits@1"
    before = _gets(s3_server, "raw/digits-v1")
    spec = phalanx_s3.spec(SPEC.replace("REF", "digits@1"))
    first = phalanx_s3.run("run", "-f", str(spec))
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count("b.csv") == 2  # both replicas read it
    assert _gets(s3_server, "raw/digits-v1") - before == len(FILES)  # one GET a file, for both
    second = phalanx_s3.run("run", "-f", str(spec))
    assert second.returncode == 0, second.stderr[-3000:]
    assert _gets(s3_server, "raw/digits-v1") - before == len(FILES)  # the cache served it

    # a changed file: a new version; two experiments starting at once fetch it once
    source2 = _upload(s3_url, "raw/digits-v2", {**FILES, "labels.txt": "0\n2\n"})
    added = phalanx_s3.cli("data", "add", "digits", source2, "--json")
    assert json.loads(added.stdout)["ref"] == "digits@2"
    before = _gets(s3_server, "raw/digits-v2")
    spec2 = phalanx_s3.spec(SPEC.replace("REF", "digits@latest"), name="v2.yml")
    both = [phalanx_s3.start("run", "-f", str(spec2)) for _ in range(2)]
    for proc in both:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        assert "[master] 2" in out and "[worker-0] 2" in out, out  # the new labels, on both
    assert _gets(s3_server, "raw/digits-v2") - before == len(FILES)

    ids = [e.id for e in phalanx_s3.store().list_experiments().items]  # newest first
    shown = json.loads(phalanx_s3.cli("get", ids[0], "-o", "json").stdout)
    assert [(i["ref"], i["mode"]) for i in shown["inputs"]] == [("digits@2", "download")]
    diff = phalanx_s3.cli("diff", ids[-1], ids[0])
    assert diff.returncode == 0, diff.stderr
    assert "digits: 'digits@1 (" in diff.stdout and "-> 'digits@2 (" in diff.stdout, diff.stdout
    doc = json.loads(phalanx_s3.cli("diff", ids[-1], ids[0], "-o", "json").stdout)
    assert doc["data"]["digits"]["a"].startswith("digits@1") and doc["data"]["digits"]["b"].startswith(
        "digits@2"
    )

    # the first run pinned digits@1 in its file: a rerun reads it again, --latest-data reads digits@2
    rerun = phalanx_s3.run("rerun", ids[-1], "--latest-data", "-o", "json")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    again = json.loads(phalanx_s3.cli("get", json.loads(rerun.stdout)["id"], "-o", "json").stdout)
    assert [i["ref"] for i in again["inputs"]] == ["digits@2"]
    assert _gets(s3_server, "raw/digits-v2") - before == len(FILES)  # from the cache
