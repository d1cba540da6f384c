"""What of a folder is code is decided once (phalanx.codeignore) for the three walks that pack it:
the record's snapshot, the bundle a laptop sends to a server and the Kubernetes code bundle. A
.gitignore (at any depth) and a .phalanxignore leave files out of all three; what the replicas or
the shell write while the snapshot walks (it runs beside them) is output, not code."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

from phalanx import bundles, repro
from phalanx.backends.kube_code import _source_files
from phalanx.cli.details import run_details_text
from phalanx.machine.procs import own_output_files


def project(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "pkg" / "model.py").write_text("W = 1\n")
    (root / "pkg" / "keep.log").write_text("kept by a deeper !pattern\n")
    (root / "pkg" / "noise.log").write_text("noise\n")
    (root / "scratch").mkdir()
    (root / "scratch" / "notes.py").write_text("x = 1\n")
    (root / "big.ckpt").write_bytes(b"\0" * 100)
    (root / ".phalanxignore").write_text("*.ckpt\nscratch/\n")
    (root / ".gitignore").write_text("*.log\n")
    (root / "pkg" / ".gitignore").write_text("!keep.log\n")
    return root


CODE = [".gitignore", ".phalanxignore", "pkg/.gitignore", "pkg/keep.log", "pkg/model.py", "train.py"]


def members(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return sorted(m.name for m in tar if m.isfile())


def test_gitignore_at_any_depth_and_phalanxignore_leave_files_out_of_every_walk(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    data, info = repro.snapshot(str(root))
    assert members(data) == CODE
    assert sorted(info["ignored"]) == ["big.ckpt", "pkg/noise.log", "scratch/"]
    assert info["ignored_count"] == 3
    assert members(bundles.pack(root)) == CODE
    assert sorted(p.relative_to(root).as_posix() for p in _source_files(root)) == CODE


def test_an_ignore_file_that_is_a_link_is_not_read(tmp_path: Path) -> None:
    """The folder may be one a job wrote: a link planted as .gitignore must not make the walk read
    a file elsewhere (its lines would decide what is packed, and the walk may run as root)."""
    root = project(tmp_path / "p")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("train.py\n")
    (root / "pkg" / ".gitignore").unlink()
    (root / ".gitignore").unlink()
    (root / ".gitignore").symlink_to(elsewhere)
    data, _ = repro.snapshot(str(root))
    assert "train.py" in members(data)


def test_what_changes_after_the_start_is_left_out_and_named_in_get(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    started = time.time_ns()
    out = root / "metrics.csv"
    out.write_text("step,loss\n")  # a replica writes it after the start
    os.utime(out, ns=(started + 1_000_000, started + 1_000_000))
    data, info = repro.snapshot(str(root), since_ns=started)
    assert "metrics.csv" not in members(data) and "train.py" in members(data)
    assert info["changed_after_start"] == ["metrics.csv"]
    source = {"git": None, "python": "3", "phalanx": "0", "packages": 1, "host": "h", "snapshot": info}
    line = next(line for line in run_details_text({"source": source}) if line.startswith("snapshot:"))
    assert "1 file changed after the start (metrics.csv)" in line


def test_the_file_the_run_s_own_output_goes_to_is_left_out(tmp_path: Path) -> None:
    """`phalanx run -f x.yml > run.log` in the experiment's folder: the shell made run.log before
    the start, and the snapshot must not hold a half-written copy of the run's own output."""
    root = project(tmp_path / "p")
    with open(root / "run.log.txt", "w") as log:
        st = os.fstat(log.fileno())
        data, info = repro.snapshot(str(root), own_output=frozenset({(st.st_dev, st.st_ino)}))
    assert "run.log.txt" not in members(data)
    assert info["changed_after_start"] == ["run.log.txt"]


def test_a_redirected_stdout_is_among_the_process_s_own_output_files(tmp_path: Path) -> None:
    saved = os.dup(1)
    try:
        with open(tmp_path / "run.log", "w") as log:
            os.dup2(log.fileno(), 1)
            st = os.fstat(log.fileno())
            assert (st.st_dev, st.st_ino) in own_output_files()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def test_the_gitignore_files_above_the_folder_apply_up_to_its_work_tree_s_top(tmp_path: Path) -> None:
    """git applies a repository's top .gitignore to a subfolder's files: so does every walk."""
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / ".gitignore").write_text("*.bak\n")
    (tmp_path / ".gitignore").write_text("train.py\n")  # above the work tree: not git's, not ours
    root = tmp_path / "repo" / "exp"
    root.mkdir()
    (root / "train.py").write_text("print(1)\n")
    (root / "old.bak").write_text("x\n")
    data, info = repro.snapshot(str(root))
    assert members(data) == ["train.py"] and info["ignored"] == ["old.bak"]
    assert members(bundles.pack(root)) == ["train.py"]
    assert [p.name for p in _source_files(root)] == ["train.py"]


def test_a_repository_nested_in_another_does_not_take_the_outer_one_s_rules(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("*.py\n")
    root = tmp_path / "inner"
    (root / ".git").mkdir(parents=True)
    (root / "train.py").write_text("print(1)\n")
    assert members(repro.snapshot(str(root))[0]) == ["train.py"]
