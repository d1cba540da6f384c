"""A server's Slurm job's run folder is its account's, on a file system other jobs of the project
share: root fills it without ever writing through a path that account controls (real processes:
root's ``tar -c`` and the account's ``tar -x``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.backends import slurm_box
from phalanx.errors import BackendUnavailable
from phalanx.machine import box, identities
from phalanx.machine.box import Isolation

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or bool(box.missing_tools()), reason="an account to copy as needs root and setpriv"
)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder the account can reach (pytest's own are root's alone), as a cluster's shared one."""
    folder = Path(tempfile.mkdtemp(prefix="phalanx-shared-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def account(home: Path) -> Isolation:
    made = identities.ensure_account("slurm-box-tests", None, home)
    return Isolation(made.name, made.uid, made.gid, "slurm-box-tests", "http://127.0.0.1:9")


def experiment_folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "train.py").write_text("print('hi')\n")
    (work / "pkg" / "payload.sh").write_text("echo owned\n")
    (work / "link").symlink_to("train.py")
    return work


def test_the_experiments_folder_is_copied_by_its_account_with_its_links(tmp_path: Path, shared: Path) -> None:
    iso = account(tmp_path / "home")
    run = shared / "e1"
    slurm_box.prepare(iso, run, str(experiment_folder(tmp_path)))
    code = run / slurm_box.CODE
    assert (code / "pkg" / "payload.sh").read_text() == "echo owned\n"
    assert os.readlink(code / "link") == "train.py"
    assert {p.lstat().st_uid for p in [code, *code.rglob("*")]} == {iso.uid}
    assert run.stat().st_mode & 0o777 == 0o700  # its script holds its token: no other account reads


def test_a_link_the_account_put_in_the_copys_way_takes_nothing_of_roots_anywhere(
    tmp_path: Path, shared: Path
) -> None:
    """What another job of the project can do while a copy runs (swap a folder for a link) is here
    done before it: the copy writes as the account, so nothing lands where only root may write."""
    iso = account(tmp_path / "home")
    guarded = shared / "root-only"  # stands for /etc/cron.d
    guarded.mkdir(mode=0o700)
    code = shared / "code"
    box.make_own_folder(code, iso, 0o755)
    (code / "pkg").symlink_to(guarded)
    os.lchown(code / "pkg", iso.uid, iso.gid)
    # tar may replace the link by a folder, or stop at it: either way, as the account
    with contextlib.suppress(BackendUnavailable):
        slurm_box.copy_as_account(iso, str(experiment_folder(tmp_path)), code)
    assert list(guarded.iterdir()) == []


def test_a_copy_that_never_ends_is_a_clear_refusal_and_leaves_no_process(
    tmp_path: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared file system that stops answering: the account's unpacking hangs. The submit gets a
    message, not a TimeoutExpired's traceback, and root's packing process is not left behind."""
    iso = account(tmp_path / "home")
    code = shared / "code"
    box.make_own_folder(code, iso, 0o755)
    dropped = box.drop_to(iso)
    monkeypatch.setattr(box, "drop_to", lambda _: [*dropped, "sh", "-c", "exec sleep 600", "sh"])
    monkeypatch.setattr(slurm_box, "COPY_TIMEOUT_S", 1)
    with pytest.raises(BackendUnavailable, match=r"took over 1 s.*file system"):
        slurm_box.copy_as_account(iso, str(experiment_folder(tmp_path)), code)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _is_our_sleep(int(p))]


def _is_our_sleep(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00600\x00"
    return False
