"""A server's Slurm job's run folder is its account's, on a file system other jobs of the project
share: root fills it without ever writing through a path that account controls (real processes:
root's ``tar -c`` and the account's ``tar -x``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from phalanx.backends import slurm_box
from phalanx.errors import BackendUnavailable
from phalanx.machine import box, identities
from phalanx.machine.box import Isolation

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or bool(box.missing_tools()), reason="an account to copy as needs root and setpriv"
)


ENV = {"PATH": box.BOX_PATH, "LC_ALL": "C"}


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
    assert run.stat().st_mode & 0o777 == 0o700  # its token file, logs and code: no other account reads


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


def big_folder(tmp_path: Path) -> Path:
    """An experiment folder far larger than a pipe holds (64 KiB): root's tar -c blocks on it until
    the account's tar -x reads, or until its end of the pipe is gone."""
    work = experiment_folder(tmp_path)
    (work / "weights.bin").write_bytes(os.urandom(2 << 20))
    return work


class _Recorded(subprocess.Popen):  # type: ignore[type-arg]
    made: ClassVar[list[subprocess.Popen[bytes]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _Recorded.made.append(self)


def test_a_copy_that_never_ends_is_a_clear_refusal_and_leaves_no_process(
    tmp_path: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared file system that stops answering: the account's unpacking hangs. The submit gets a
    message, not a TimeoutExpired's traceback, and root's packing (blocked on a full pipe) is ended."""
    iso = account(tmp_path / "home")
    code = shared / "code"
    box.make_own_folder(code, iso, 0o755)
    dropped = box.drop_to(iso)
    monkeypatch.setattr(box, "drop_to", lambda _: [*dropped, "sh", "-c", "exec sleep 600", "sh"])
    monkeypatch.setattr(slurm_box, "COPY_TIMEOUT_S", 1)
    monkeypatch.setattr(slurm_box.subprocess, "Popen", _Recorded)
    _Recorded.made.clear()
    with pytest.raises(BackendUnavailable, match=r"took over 1 s.*file system"):
        slurm_box.copy_as_account(iso, str(big_folder(tmp_path)), code)
    (pack, _) = _Recorded.made  # root's tar -c, and subprocess.run's setpriv (killed by run itself)
    assert pack.args[1] == "-c" and pack.returncode is not None  # ended and reaped, not left waiting


def test_an_unpacking_that_fails_at_once_says_why_at_once(
    tmp_path: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The account cannot write where its copy goes (a shared folder it cannot traverse: a first
    setup's mistake): tar -x's own words come back, not a wait for the copy's timeout while root's
    tar -c blocks on a pipe nobody reads."""
    iso = account(tmp_path / "home")
    code = shared / "code"
    box.make_own_folder(code, iso, 0o755)
    dropped = box.drop_to(iso)
    failing = [*dropped, "sh", "-c", "echo 'tar: code: Cannot open: Permission denied' >&2; exit 2", "sh"]
    monkeypatch.setattr(box, "drop_to", lambda _: failing)
    monkeypatch.setattr(slurm_box, "COPY_TIMEOUT_S", 120)  # were it waited for: "took over", not this
    with pytest.raises(BackendUnavailable, match=r"failed: tar: code: Cannot open: Permission denied"):
        slurm_box.copy_as_account(iso, str(big_folder(tmp_path)), code)


def test_a_restarts_archive_runs_as_the_account_with_none_of_the_servers_variables(
    tmp_path: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The account's other processes (its jobs' replicas on the server machine) may read the
    environment of anything running as it: root's helper gets none of the server's."""
    iso = account(tmp_path / "home")
    run = shared / "e1"
    slurm_box.prepare(iso, run, str(experiment_folder(tmp_path)))
    box.make_own_folder(run / "logs", iso, 0o755)
    seen = run / "environ.txt"
    dropped = box.drop_to(iso)
    monkeypatch.setattr(box, "drop_to", lambda _: [*dropped, "sh", "-c", f'env > {seen}; exec "$@"', "sh"])
    monkeypatch.setenv("PHALANX_DB_URL", "postgresql://phalanx:db-secret@db/phalanx")
    monkeypatch.setenv("PHALANX_TOKEN", "the-servers-token")
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")  # this venv is not the account's to run
    slurm_box.archive_as_account(iso, run)
    environ = seen.read_text()
    assert "PATH=" in environ  # the dump was written, as the account
    assert "db-secret" not in environ and "the-servers-token" not in environ
    assert (run / "attempts" / "0" / "logs").is_dir()  # and it did its job


def test_a_jobs_token_file_is_its_accounts_alone(tmp_path: Path, shared: Path) -> None:
    iso = account(tmp_path / "home")
    run = shared / "e1"
    slurm_box.prepare(iso, run, str(experiment_folder(tmp_path)))
    token = run / "token"
    token.symlink_to(shared / "elsewhere")  # planted: the file is made anew, never through it
    box.write_new(token, b"phx-exp.e1.secret", mode=0o600, owner=iso)
    assert not token.is_symlink() and not (shared / "elsewhere").exists()
    held = token.stat()
    assert (held.st_uid, held.st_gid, held.st_mode & 0o777) == (iso.uid, iso.gid, 0o600)
    mine = subprocess.run([*box.drop_to(iso), "cat", str(token)], capture_output=True, text=True, env=ENV)
    assert mine.stdout == "phx-exp.e1.secret"  # what the job's script reads
    nobody = Isolation("nobody", 65534, 65534, "other", "http://127.0.0.1:9")
    other = subprocess.run([*box.drop_to(nobody), "cat", str(token)], capture_output=True, text=True, env=ENV)
    assert other.returncode != 0 and "Permission denied" in other.stderr
