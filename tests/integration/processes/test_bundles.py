"""Code bundles sent to a server: reproducible bytes, the snapshot's skips, a clear cap, safe unpacking."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from phalanx.bundles import BundleStore, digest, pack, unpack
from phalanx.errors import UsageError


def project(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    for skipped in (".git", ".venv", "__pycache__", "data"):
        (root / skipped).mkdir()
        (root / skipped / "f").write_text("not code\n")
    return root


def names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return sorted(tar.getnames())


def test_the_same_files_give_the_same_bytes_and_skip_vcs_venvs_caches_and_data(tmp_path: Path) -> None:
    a = pack(project(tmp_path / "a"))
    b = pack(project(tmp_path / "b"))
    assert a == b and digest(a) == digest(b)
    assert names(a) == ["pkg/model.py", "train.py"]


def test_a_folder_over_the_cap_is_refused_naming_its_largest_file(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    (root / "weights.bin").write_bytes(b"\0" * (3 << 20))
    with pytest.raises(UsageError, match=r"the cap is 2 MiB; largest: weights.bin \(3 MiB\)"):
        pack(root, cap=2 << 20)


def test_unpack_writes_the_files_and_refuses_a_member_outside_the_folder(tmp_path: Path) -> None:
    assert unpack(pack(project(tmp_path / "p")), tmp_path / "out") == 2
    assert (tmp_path / "out" / "pkg" / "model.py").read_text() == "X = 1\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped.py")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(UsageError, match="outside its folder"):
        unpack(buf.getvalue(), tmp_path / "out2")
    assert not (tmp_path / "escaped.py").exists()
    with pytest.raises(UsageError, match="unpacks to more than"):
        unpack(pack(project(tmp_path / "q")), tmp_path / "out3", cap=5)
    with pytest.raises(UsageError, match="not a readable"):
        unpack(b"not a tar", tmp_path / "out4")


def test_a_bundle_is_kept_once_by_its_sha256(tmp_path: Path) -> None:
    store = BundleStore(tmp_path / "bundles")
    data = pack(project(tmp_path / "p"))
    assert store.put(data) == store.put(data) == digest(data)
    assert [p.name for p in (tmp_path / "bundles").iterdir()] == [f"{digest(data)}.tar.gz"]


def test_in_a_git_work_tree_what_gitignore_ignores_stays_behind(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    shutil.rmtree(root / ".git")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("*.log\nscratch/\n")
    (root / "run.log").write_text("noise\n")
    (root / "scratch").mkdir()
    (root / "scratch" / "notes.py").write_text("x\n")
    assert names(pack(root)) == [".gitignore", "pkg/model.py", "train.py"]
