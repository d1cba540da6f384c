"""A cluster node's fetch of its inputs (what each Slurm task runs before its command): the orders
name files and hashes only, the node's cache path takes its name for ``%n``, the task's shell gets
``export PHALANX_INPUT_<NAME>=...``, and a changed file, or a node without the credentials to read
S3, is exit 2 with the reason in one line, nothing used."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from phalanx.backends.slurm_script import NodeFetch, render
from phalanx.data.inputs import fetch_order
from phalanx.data.nodefetch import main, node_cache
from phalanx.plan import build_plan
from phalanx.spec.inputs import InputSpec
from phalanx.spec.loader import load_spec_text
from phalanx.store.manifest import FileEntry, Manifest, build_manifest


def _orders(folder: Path, tmp_path: Path) -> Path:
    m = build_manifest(str(folder))
    order = fetch_order(InputSpec("digits", dataset="digits@1"), m, m.digest, "input 'digits'")
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps([order]))
    return path


def test_a_node_fetches_into_its_own_cache_and_refuses_a_changed_file(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    monkeypatch.setenv("PHALANX_NODE_CACHE", str(tmp_path / "cache" / "%n"))
    assert node_cache() == tmp_path / "cache" / "n2"
    orders = _orders(folder, tmp_path)
    digest = json.loads(orders.read_text())[0]["key"]
    assert main([str(orders)]) == 0
    where = tmp_path / "cache" / "n2" / digest
    assert capsys.readouterr().out == f"export PHALANX_INPUT_DIGITS={where}\n"
    assert (where / "train" / "x.csv").read_text() == "1,2,3\n"

    (folder / "labels.txt").write_text("0\n2\n")  # changed after the version was recorded
    assert main([str(orders), str(tmp_path / "other-node")]) == 2
    err = capsys.readouterr().err
    assert "file 'labels.txt' changed since the version was recorded" in err and "Traceback" not in err
    assert not (tmp_path / "other-node" / digest).exists()  # no half folder


def test_the_sbatch_script_fetches_before_the_command_and_holds_no_secret(
    folder: Path, tmp_path: Path
) -> None:
    plan = build_plan(load_spec_text("version: 1\nkind: experiment\nrun:\n  cmd: python train.py\n"))
    order = json.loads(_orders(folder, tmp_path).read_text())[0]
    fetch = NodeFetch((order,), "/opt/phalanx/bin/python", "/opt/phalanx/lib", cache="/scratch/%n")
    script = render(plan, "0123456789ab", "/w", tmp_path / "run", {"PATH": "/bin"}, node_fetch=fetch)
    assert json.dumps([order], sort_keys=True) in script
    assert "export PHALANX_NODE_CACHE=/scratch/%n" in script
    step = script.index("PYTHONPATH=/opt/phalanx/lib /opt/phalanx/bin/python -m phalanx.data.nodefetch")
    assert step < script.index('setsid /bin/sh -c "$PHALANX_COMMAND"')
    assert "phalanx.data.nodefetch" not in render(
        plan, "0123456789ab", "/w", tmp_path / "run", {"PATH": "/bin"}
    )


def test_a_node_without_s3_credentials_is_exit_2_with_one_line_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("s3fs")
    for var in [v for v in os.environ if v.startswith(("AWS_", "BOTO_"))]:
        monkeypatch.delenv(var)
    # nothing for botocore to find: no variables, no files, no instance metadata service to ask
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("BOTO_CONFIG", str(tmp_path / "no-boto-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # loopback, were it ever asked
    monkeypatch.setenv("SLURMD_NODENAME", "n3")
    m = Manifest("s3://team-data/digits", (FileEntry("train/x.csv", 6, "0" * 64),))
    orders = tmp_path / "inputs.json"
    orders.write_text(
        json.dumps([fetch_order(InputSpec("digits", dataset="digits@1"), m, m.digest, "input 'digits'")])
    )
    assert main([str(orders), str(tmp_path / "cache")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"phalanx: input 'digits': no credentials to read s3://team-data/digits on {socket.gethostname()}"
        " (Unable to locate credentials); give this machine (a cluster's nodes: each of them) AWS"
        " credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance role, or"
        " AWS_SHARED_CREDENTIALS_FILE naming a file it can read (the experiment file's env:)\n"
    )
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f"{m.digest}.lock"]  # no half folder


def test_the_default_cache_is_this_accounts_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PHALANX_NODE_CACHE", raising=False)
    mine = tmp_path / f"phalanx-{os.getuid()}"
    assert node_cache(tmp=str(tmp_path)) == mine / "data"
    assert mine.stat().st_mode & 0o777 == 0o700


def test_a_cache_folder_another_account_made_first_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another project's job on the node made /tmp/phalanx-<this uid>, to hand this job its files
    or to keep it from caching: the job fetches into a new folder of its own, and says why."""
    monkeypatch.delenv("PHALANX_NODE_CACHE", raising=False)
    squat = tmp_path / f"phalanx-{os.getuid()}"
    squat.mkdir(mode=0o777)
    squat.chmod(0o777)  # whoever made it lets anyone write there
    cache = node_cache(tmp=str(tmp_path))
    assert cache.parent != squat and cache.parent.parent == tmp_path
    assert cache.parent.stat().st_mode & 0o777 == 0o700
    assert "is not this account's own folder" in capsys.readouterr().err
