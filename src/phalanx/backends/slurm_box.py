"""A server's Slurm job keeps the box's boundary (docs/security.md#slurm): it is submitted as its
project's own account (``sbatch --uid/--gid``: Slurm runs it, and everything it starts on the
nodes, as that account), with only the environment its script exports (``--export=NONE``, as
every Phalanx job), reporting to the server over HTTP with its experiment's write-only token.

The job writes its run folder on the shared file system (its logs, state files, spool, a copy of
its code), so that folder is its account's; the engine, which runs as root, reads the job's files
there only through ``machine.box.open_inside`` (no symbolic link is followed on the way) and writes
there only through ``machine.box.write_new``; moving an attempt's files aside on a restart is done
as the job's account.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from phalanx.errors import BackendUnavailable
from phalanx.machine import box
from phalanx.machine.box import Isolation

CODE = "code"  # <run dir>/code: the copy of the experiment's folder the job runs in
COPY_TIMEOUT_S = 600  # the copy of an experiment's folder (a bundle holds at most a few GiB)
ARCHIVE_TIMEOUT_S = 60  # a restart's move of the last attempt's files aside (renames only)
SUBFOLDERS = ("logs", "state", "spool", CODE)
MESSAGE_BYTES = 2000  # of a failed copy's own words, in the refusal
# what root's helpers get, and so what runs as the account gets: never the server's environment (its
# database password, its token), which the account's other processes could read in /proc/<pid>/environ
_ENV = {"PATH": box.BOX_PATH, "LC_ALL": "C"}


def job_env(env: Mapping[str, str], run_dir: Path) -> dict[str, str]:
    """What a boxed job exports: its spool in its own run folder, nothing of the server's home."""
    out = {k: v for k, v in env.items() if k not in ("PHALANX_HOME", "PHALANX_INGESTER_PID")}
    out["PHALANX_SPOOL"] = str(run_dir / "spool")
    return out


def said_in(script: str, iso: Isolation) -> str:
    """The script with a line saying as whom it is submitted (the dry run shows it)."""
    shebang, _, rest = script.partition("\n")
    line = f"# a server's job: submitted as {iso.account} (sbatch {' '.join(sbatch_identity(iso))})"
    return f"{shebang}\n{line}\n{rest}"


def sbatch_identity(iso: Isolation) -> list[str]:
    """sbatch's options that make the job the project's account's (root may give them)."""
    return [f"--uid={iso.uid}", f"--gid={iso.gid}"]


def prepare(iso: Isolation, run_dir: Path, workdir: str) -> None:
    """The run folder (the account's alone: its script, logs and code are no other project's to
    read) and its subfolders, the experiment's folder (the server's own work folder, which only
    root writes) copied into it by the account."""
    box.make_own_folder(run_dir, iso, 0o700)  # its token file, logs and code: no other account reads
    for name in SUBFOLDERS:
        box.make_own_folder(run_dir / name, iso, 0o755)
    code = run_dir / CODE
    if not any(code.iterdir()):
        copy_as_account(iso, workdir, code)


def copy_as_account(iso: Isolation, source: str, folder: Path) -> None:
    """``source`` (root's own files) copied into ``folder`` (the account's) by the account: root
    reads them into a pipe (``tar -c``), the account unpacks it (``tar -x``, as its uid). root never
    writes through a path the account controls: another job of the project, on a node that shares
    the folder, could swap a folder being copied for a link (to /etc/cron.d), and root's copy
    would follow it there. Symbolic links in ``source`` are copied as links."""
    tar = shutil.which("tar", path=box.BOX_PATH) or "tar"
    deadline = time.monotonic() + COPY_TIMEOUT_S  # the whole copy, both ends
    with (
        tempfile.TemporaryFile() as said,  # tar -c's complaints: a file never fills as a pipe would
        subprocess.Popen(
            [tar, "-c", "-C", source, "."], stdout=subprocess.PIPE, stderr=said, env=_ENV
        ) as pack,
    ):
        assert pack.stdout is not None
        try:
            unpack = subprocess.run(
                [*box.drop_to(iso), tar, "-x", "-C", str(folder)],
                stdin=pack.stdout,
                capture_output=True,
                text=True,
                env=_ENV,
                timeout=COPY_TIMEOUT_S,
                check=False,
            )
            pack.stdout.close()  # an unpacking that ended early: tar -c gets SIGPIPE, not a wait
            packed = pack.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pack.kill()
            raise BackendUnavailable(
                f"copying the experiment's folder for {iso.account} took over {COPY_TIMEOUT_S:g} s:"
                " is the cluster's shared file system slow or full? Submit again once it answers"
            ) from None
        finally:
            pack.stdout.close()
        said.seek(0)
        packing = said.read(MESSAGE_BYTES).decode(errors="replace").strip()
    if unpack.returncode != 0:  # its own words: tar -c then only says its pipe broke
        why = unpack.stderr.strip()[:MESSAGE_BYTES]
        raise BackendUnavailable(f"copying the experiment's folder for {iso.account} failed: {why}")
    if packed != 0:
        raise BackendUnavailable(f"reading the experiment's folder {source} failed: {packing}")


_ARCHIVE = """
import os, sys
run = sys.argv[1]
names = [n for n in ("logs", "state", "cancelled", "tasks") if os.path.lexists(os.path.join(run, n))]
if names:
    attempts = os.path.join(run, "attempts")
    os.makedirs(attempts, exist_ok=True)
    target = os.path.join(attempts, str(len(os.listdir(attempts))))
    os.mkdir(target)
    for n in names:
        os.rename(os.path.join(run, n), os.path.join(target, n))
"""


def archive_as_account(iso: Isolation, run_dir: Path) -> None:
    """A restart's archive of the last attempt (engine restarts; a requeue's is the script's own),
    done as the job's account in its own folder: root moves nothing there."""
    argv = [*box.drop_to(iso), sys.executable, "-I", "-c", _ARCHIVE, str(run_dir)]
    try:  # with none of the server's variables: the account's other processes may read its environ
        done = subprocess.run(
            argv, capture_output=True, text=True, env=_ENV, timeout=ARCHIVE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise BackendUnavailable(
            f"moving the last attempt's files aside took over {ARCHIVE_TIMEOUT_S:g} s:"
            " is the cluster's shared file system slow?"
        ) from None
    if done.returncode != 0:
        raise BackendUnavailable(f"moving the last attempt's files aside failed: {done.stderr.strip()}")
    for name in ("logs", "state"):
        box.make_own_folder(run_dir / name, iso, 0o755)
