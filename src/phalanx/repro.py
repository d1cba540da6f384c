"""What an experiment ran, recorded so it can be rerun and compared (`phalanx rerun`, `phalanx diff`).

At start the supervisor records, off the replicas' path (a thread while they start): the git commit,
branch and uncommitted diff (``git diff HEAD``, plus untracked files' names) of the source folder
when it is in a git work tree; the resolved package list of the interpreter the replicas run
(``importlib.metadata`` in that interpreter); Python's and Phalanx's versions; the host; how it was
launched (file, params, folder, cluster); and a snapshot of the source folder, stored as the
artifact ``_source/source.tar.gz``.

The snapshot holds at most SNAPSHOT_MAX_BYTES (50 MiB) of files, each at most SNAPSHOT_MAX_FILE
(10 MiB), looks at 20,000 files at most, and skips version control (.git, .hg, .svn), virtual
environments (any folder holding a pyvenv.cfg, and .venv/venv/env), caches (__pycache__,
.mypy_cache, .pytest_cache, .ruff_cache, node_modules) and data folders (data, datasets,
checkpoints, outputs, wandb, mlruns, lightning_logs), a Phalanx home inside the folder, what the
folder's .gitignore files and a .phalanxignore exclude (``codeignore``), the files the replicas or
the shell changed after the start (the walk runs beside the replicas: what they write is output,
not code) and the file `phalanx run ... > run.log` writes to. What was skipped, ignored or cut is
listed in the record, so nobody mistakes a partial snapshot for a whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import socket
import stat
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from phalanx._version import __version__
from phalanx.codeignore import DATA_DIRS, IgnoreRules, skipped_dir

SNAPSHOT_MAX_BYTES = 50 * 1024 * 1024
SNAPSHOT_MAX_FILE = 10 * 1024 * 1024
DIFF_MAX_BYTES = 1024 * 1024
SNAPSHOT_PATH = "_source/source.tar.gz"
LISTED_MAX = 100  # capped files named in the record (all are counted)
WALK_MAX_FILES = 20000  # files looked at before the walk stops (a home folder given as the source)

_PACKAGES = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted({(d.metadata['Name'] or '?') + '==' + d.version for d in m.distributions()})))"
)


def _git(folder: str, *args: str, box: Sequence[str] = ()) -> str | None:
    try:
        out = subprocess.run(
            [*box, "git", "-C", folder, *args],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
            env=_boxed_env() if box else None,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def git_info(folder: str, box: Sequence[str] = ()) -> dict[str, Any] | None:
    """Commit, branch, uncommitted diff (tracked files) and untracked files; None outside git.
    ``box``: run git in it (a folder a box writes: its repository's config may name commands)."""
    top = _git(folder, "rev-parse", "--show-toplevel", box=box)
    if top is None:
        return None
    commit = (_git(folder, "rev-parse", "HEAD", box=box) or "").strip() or None
    branch = (_git(folder, "rev-parse", "--abbrev-ref", "HEAD", box=box) or "").strip() or None
    diff = _git(folder, "diff", "HEAD", "--no-color", "--", ".", box=box) or ""
    untracked = (_git(folder, "ls-files", "--others", "--exclude-standard", "--", ".", box=box) or "").split(
        "\n"
    )
    truncated = len(diff.encode()) > DIFF_MAX_BYTES
    return {
        "root": top.strip(),
        "commit": commit,
        "branch": branch,
        "dirty": bool(diff.strip()) or any(untracked),
        "diff": diff.encode()[:DIFF_MAX_BYTES].decode(errors="ignore") if truncated else diff,
        "diff_truncated": truncated,
        "untracked": [u for u in untracked if u],
    }


def packages(python: str, box: Sequence[str] = (), cache: Path | None = None) -> list[str]:
    """``name==version`` of every distribution the interpreter sees (what the replicas import).
    ``box``: run another interpreter in it (a box's venv: its packages' code runs at start-up).
    ``cache``: a folder (``$PHALANX_HOME/cache``) keeping this interpreter's list between runs
    (``_cached_here``); another interpreter's is read each time."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return _distributions() if cache is None else _cached_here(cache)
    try:
        out = subprocess.run(
            [*box, python, "-c", _PACKAGES],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=_boxed_env() if box else None,
        ).stdout
        return list(json.loads(out))
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def _boxed_env() -> dict[str, str]:
    """What a boxed look starts with: a PATH alone. bubblewrap runs as root, and this process's
    environment may hold a project's secrets while its replicas start (one named LD_PRELOAD would
    be loaded by root)."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp"}  # machine.handoff.TRUSTED_PATH


def _distributions() -> list[str]:
    import importlib.metadata as md  # why: listed once per environment (cached): most runs never list

    return sorted({f"{d.metadata['Name'] or '?'}=={d.version}" for d in md.distributions()})


METADATA_ENTRIES = (".dist-info", ".egg-info", ".egg")  # what importlib.metadata looks for


def environment_key() -> list[Any]:
    """What changes when a package of this interpreter is installed, upgraded or removed: the
    interpreter, its prefix, and in each folder it imports from (``sys.path``, where
    ``importlib.metadata`` looks) the distributions' metadata entries (``name-version.dist-info``
    and the like) with their modification times. Other files there (a script's folder it writes
    into) change nothing, and neither does a folder holding no distribution: a foreground
    `phalanx run` has the folder it is typed in on its path, a detached supervisor (``-P``) not, and
    both keep one list."""
    folders: list[list[Any]] = []
    for entry in sys.path:
        folder = os.path.abspath(entry or ".")
        entries = _metadata_entries(folder)
        if entries:  # no distribution there (or no folder): nothing importlib.metadata would find
            folders.append([folder, entries])
    return [sys.executable, sys.prefix, sys.version, folders]


def _metadata_entries(folder: str) -> list[Any] | int | None:
    """The metadata entries of ``folder`` as [name, mtime]; a zip file's own mtime; None if absent."""
    try:
        with os.scandir(folder) as found:
            entries = [e for e in found if e.name.endswith(METADATA_ENTRIES)]
            listed: list[Any] = []
            for e in entries:
                try:
                    listed.append([e.name, e.stat().st_mtime_ns])
                except OSError:  # a dangling link: listed without a time
                    listed.append([e.name, None])
            return sorted(listed)
    except NotADirectoryError:  # a zip file on the path (pythonXY.zip, an egg)
        with contextlib.suppress(OSError):
            return os.stat(folder).st_mtime_ns
        return None
    except OSError:
        return None


def _cached_here(cache: Path) -> list[str]:
    """This interpreter's packages, read from ``cache/packages/<interpreter>.json`` while its
    ``environment_key`` is the one stored there; else read (every distribution's metadata: a tenth
    of a submission's CPU) and stored. The key is taken before reading, so an install meanwhile
    leaves a key that no longer matches. A cache that cannot be read or written is skipped."""
    key = environment_key()
    digest = hashlib.sha256(f"{sys.executable}\0{sys.prefix}".encode()).hexdigest()[:16]
    path = cache / "packages" / f"{digest}.json"
    try:
        kept = json.loads(path.read_text())
        if kept["key"] == key and isinstance(kept["packages"], list):
            return [str(p) for p in kept["packages"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = _distributions()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps({"key": key, "packages": found}))
        os.replace(tmp, path)  # whole or not at all: another run may read it right now
    return found


def _skipped_dir(path: Path) -> bool:
    """Version control, caches, data folders, a venv, or a Phalanx home (its store, spool and
    artifacts, when PHALANX_HOME lies inside the source folder)."""
    return (
        skipped_dir(path.name)
        or (path / "pyvenv.cfg").exists()
        or (path / "phalanx.db").exists()
        or _is_home(path)
    )


def _is_home(path: Path) -> bool:
    home = os.environ.get("PHALANX_HOME")
    if not home:
        return False
    try:
        return path.resolve() == Path(home).expanduser().resolve()
    except OSError:
        return False


def snapshot(
    folder: str, since_ns: int | None = None, own_output: frozenset[tuple[int, int]] = frozenset()
) -> tuple[bytes, dict[str, Any]]:
    """A tar.gz of ``folder`` within the caps, and what it holds and left out.

    Left out besides the caps: what ``codeignore`` leaves out (.gitignore, .phalanxignore),
    files changed after ``since_ns`` (the start: the replicas run while this walks, and what they
    write is output, not code) and ``own_output`` ((device, inode) of the files this process's
    output goes to: `phalanx run ... > run.log` in the folder).

    Walked by file descriptors (os.fwalk) and each file opened relative to its folder's with
    O_NOFOLLOW: the folder may be one a box writes while this runs (a server-run experiment's),
    and a link it planted must be stored as a link, never read through as this process (root)."""
    root = Path(folder)
    rules = IgnoreRules.of_work_tree(root)
    buf = io.BytesIO()
    total = 0
    files: list[str] = []
    skipped: list[str] = []
    left = {"ignored": [], "changed_after_start": []}  # type: dict[str, list[str]]
    counts = dict.fromkeys(left, 0)
    capped: list[str] = []
    capped_count = 0
    seen = 0
    walk_stopped = False

    def leave(kind: str, rel: str) -> None:
        counts[kind] += 1
        if len(left[kind]) < LISTED_MAX:
            left[kind].append(rel)

    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(root, follow_symlinks=False):
            seen += len(filenames)
            if seen > WALK_MAX_FILES:  # a home folder or a data tree: stop looking, say so
                capped.append(f"... (stopped after {WALK_MAX_FILES} files)")
                walk_stopped = True
                break
            here = Path(dirpath)
            rel_dir = here.relative_to(root).as_posix().removeprefix(".")
            rules.add_folder(rel_dir, dir_fd)
            keep = []
            for d in sorted(dirnames):
                rel = (here / d).relative_to(root).as_posix()
                if _skipped_dir(here / d):
                    skipped.append(rel + "/")
                elif rules.ignored(rel, is_dir=True):
                    leave("ignored", rel + "/")
                else:
                    keep.append(d)
            dirnames[:] = keep
            for name in sorted(filenames):
                rel = (here / name).relative_to(root).as_posix()
                if rules.ignored(rel):
                    leave("ignored", rel)
                    continue
                if _written_since(name, dir_fd, since_ns, own_output):
                    leave("changed_after_start", rel)
                    continue
                member = _member(name, dir_fd, rel)
                if member is None:
                    continue
                entry, handle = member
                with handle:
                    if entry.size > SNAPSHOT_MAX_FILE or total + entry.size > SNAPSHOT_MAX_BYTES:
                        capped_count += 1
                        if len(capped) < LISTED_MAX:
                            capped.append(rel)
                        continue
                    tar.addfile(entry, handle if entry.isfile() else None)
                total += entry.size
                files.append(rel)
    info = {
        "path": SNAPSHOT_PATH,
        "files": len(files),
        "bytes": total,
        "skipped": skipped,
        "ignored": left["ignored"],
        "ignored_count": counts["ignored"],
        "changed_after_start": left["changed_after_start"],
        "changed_after_start_count": counts["changed_after_start"],
        "capped": capped,
        "capped_count": capped_count,
        "walk_stopped": walk_stopped,
        "max_bytes": SNAPSHOT_MAX_BYTES,
        "max_file_bytes": SNAPSHOT_MAX_FILE,
    }
    return buf.getvalue(), info


def _written_since(name: str, dir_fd: int, since_ns: int | None, own: frozenset[tuple[int, int]]) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in own or (since_ns is not None and st.st_mtime_ns > since_ns)


def _member(name: str, dir_fd: int, rel: str) -> tuple[tarfile.TarInfo, Any] | None:
    """A file of the walk as a tar member and its open file (a link as a link, with nothing to
    read); None for what is neither a regular file nor a link, or vanished meanwhile."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        info = tarfile.TarInfo(rel)
        info.mtime, info.mode = int(st.st_mtime), stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=dir_fd)
            return info, contextlib.nullcontext()
        if not stat.S_ISREG(st.st_mode):
            return None
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    handle = os.fdopen(fd, "rb")
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode):  # swapped for something else since the look
        handle.close()
        return None
    info.size = opened.st_size
    return info, handle


def collect(
    *,
    workdir: str,
    python: str,
    launch: Mapping[str, Any],
    box: Sequence[str] = (),
    cache: Path | None = None,
    since_ns: int | None = None,
    own_output: frozenset[tuple[int, int]] = frozenset(),
) -> tuple[dict[str, Any], bytes]:
    """The record (without the snapshot's bytes) and the snapshot. ``box``: an argv prefix that
    runs git and the experiment's interpreter in its box (a server-run experiment). ``cache``:
    where the package list of this interpreter is kept between runs (``packages``). ``since_ns``,
    ``own_output``: when the replicas started, where the starter's output goes (``snapshot``)."""
    data, snap = snapshot(workdir, since_ns, own_output)
    record = {
        "git": git_info(workdir, box),
        "packages": packages(python, box, cache),
        "python": platform.python_version(),
        "python_executable": python,
        "phalanx": __version__,
        "host": socket.gethostname(),
        "platform": platform_name(),
        "launch": dict(launch),
        "snapshot": snap,
    }
    return record, data


def platform_name() -> str:
    """The platform an experiment ran on (``Linux-6.1.0-x86_64-with-glibc2.36``): on Linux with glibc,
    ``platform.platform()`` without the processor it runs `uname -p` for (a process per record; on
    Debian its answer is `unknown` and left out, elsewhere it repeats the machine, `x86_64-x86_64`)."""
    if sys.platform != "linux":
        return platform.platform()
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"; musl has no answer
    except (ValueError, OSError):
        libc = ""
    if not libc.startswith("glibc "):
        return platform.platform()
    u = os.uname()
    name = "-".join(part for part in (u.sysname, u.release, u.machine, "with", libc.replace(" ", "")) if part)
    return name.replace(" ", "_")


def source_files(data: bytes) -> dict[str, bytes]:
    """The files of a snapshot, by path, within the limits a snapshot is made with: a file over
    SNAPSHOT_MAX_FILE is left out, and reading stops at SNAPSHOT_MAX_BYTES or WALK_MAX_FILES
    members. The archive is read from the artifact store, where anyone holding the experiment's
    token can replace it: a few KiB of gzip can unpack to many GiB (the server's diff would hold
    them all in memory)."""
    out: dict[str, bytes] = {}
    total = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for count, member in enumerate(tar, 1):
            if count > WALK_MAX_FILES:
                break
            if not member.isfile() or member.size > SNAPSHOT_MAX_FILE:
                continue
            total += member.size
            if total > SNAPSHOT_MAX_BYTES:
                break
            f = tar.extractfile(member)
            if f is not None:
                out[member.name] = f.read(SNAPSHOT_MAX_FILE)
    return out


def extract(data: bytes, dest: Path) -> None:
    """Unpack a snapshot into ``dest`` (only regular files, only below it)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, content in source_files(data).items():
        target = (dest / name).resolve()
        if not str(target).startswith(str(dest.resolve()) + os.sep):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def left_out_note(snapshot: dict[str, Any] | None) -> str | None:
    """What a rerun from this snapshot runs without (data-like folders skipped, files over the caps),
    in one line for the terminal; None when nothing a script might read was left out."""
    snapshot = snapshot or {}
    folders = [d for d in snapshot.get("skipped") or [] if d.rstrip("/").rsplit("/", 1)[-1] in DATA_DIRS]
    walk_stopped = bool(snapshot.get("walk_stopped")) or any(
        str(c).startswith("... (stopped after") for c in snapshot.get("capped") or []
    )
    capped = [c for c in snapshot.get("capped") or [] if not str(c).startswith("... (stopped after")]
    count = int(snapshot.get("capped_count") or len(capped))
    parts = []
    if folders:
        parts.append(
            ", ".join(folders[:5]) + (f" and {len(folders) - 5} more folders" if len(folders) > 5 else "")
        )
    if count:
        shown = ", ".join(capped[:3]) + (", ..." if count > 3 else "")
        parts.append(f"{count} file{'s' if count != 1 else ''} over the size caps ({shown})")
    if walk_stopped:  # a home folder or a data tree as the script's folder
        parts.append(f"every file after the first {WALK_MAX_FILES} it looked at (the folder is too large)")
    changed = [str(c) for c in snapshot.get("changed_after_start") or []]
    if changed:  # what the replicas or the shell wrote while the walk ran: output, not code
        n = int(snapshot.get("changed_after_start_count") or len(changed))
        shown = ", ".join(changed[:3]) + (", ..." if n > 3 else "")
        parts.append(f"{n} file{'s' if n != 1 else ''} changed after the start ({shown})")
    if not parts:
        return None
    return (
        f"the snapshot left out {'; '.join(parts)}: the rerun runs without them "
        "(a script that reads them should take their path as a param)"
    )


def snapshot_path(attempt: int | None) -> str:
    """Where an attempt's snapshot is stored: the first attempt's at SNAPSHOT_PATH (as always), a
    resumed attempt's beside it, so each attempt's code stays readable."""
    return SNAPSHOT_PATH if not attempt else f"_source/attempt-{attempt}/source.tar.gz"


def with_attempt(previous: Mapping[str, Any], record: Mapping[str, Any], attempt: int) -> dict[str, Any]:
    """The experiment's record once ``attempt`` (a resume) has recorded what it runs: the new
    attempt's record at the top (what `get`, `diff` and `rerun` read by default: what produced the
    latest result), and every attempt's record in ``attempts``, oldest first, each with its number.
    What the resume does not know (the file and params it was launched with) is the experiment's."""
    history = [dict(a) for a in previous.get("attempts") or []]
    if not history and previous:
        first = {k: v for k, v in previous.items() if k != "attempts"}
        history.append({**first, "attempt": int(first.get("attempt") or 0)})
    launch = {**dict(previous.get("launch") or {}), **dict(record.get("launch") or {})}
    current = {**record, "launch": launch, "attempt": attempt}
    history = [a for a in history if a.get("attempt") != attempt] + [current]
    return {**current, "attempts": history}


def attempt_record(record: Mapping[str, Any], attempt: int | None) -> dict[str, Any] | None:
    """The record of one attempt (None: not recorded); ``None`` asks for the experiment's own."""
    if attempt is None:
        return {k: v for k, v in record.items() if k != "attempts"}
    for entry in record.get("attempts") or []:
        if entry.get("attempt") == attempt:
            return dict(entry)
    if attempt == 0 and record and not record.get("attempts"):  # one attempt: the record is its
        return {k: v for k, v in record.items() if k != "attempts"}
    return None


def rerun_record(record: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What `phalanx rerun` starts from by default: the last attempt that succeeded and recorded
    its code, else the experiment's latest record. ``attempts``: the store's attempt rows."""
    recorded = sorted(int(a.get("attempt") or 0) for a in record.get("attempts") or [])
    succeeded = [int(a["number"]) for a in attempts if str(a.get("status")) == "succeeded"]
    for number in reversed(succeeded):
        # a restart records no code of its own: it ran what the attempt before it recorded
        ran = max((n for n in recorded if n <= number), default=None)
        found = attempt_record(record, ran) if ran is not None else None
        if found and (found.get("snapshot") or {}).get("path"):
            return found
    return attempt_record(record, None) or {}


def attempt_changes(
    record: Mapping[str, Any], read: Callable[[str], bytes | None]
) -> dict[int, dict[str, Any]]:
    """Per recorded attempt (a resume records its own code): its snapshot, and the files that
    differ from the attempt recorded before it (added, removed or changed; None for the first).
    ``read``: a snapshot's bytes by artifact path (None when it is gone). Empty with one attempt."""
    entries = sorted(record.get("attempts") or [], key=lambda a: int(a.get("attempt") or 0))
    if len(entries) < 2:
        return {}
    out: dict[int, dict[str, Any]] = {}
    before: dict[str, bytes] | None = None
    for entry in entries:
        path = (entry.get("snapshot") or {}).get("path")
        data = read(path) if path else None
        files = source_files(data) if data is not None else None
        changed = (
            sorted(n for n in set(before) | set(files) if before.get(n) != files.get(n))
            if files is not None and before is not None
            else None
        )
        out[int(entry.get("attempt") or 0)] = {"snapshot": path, "changed": changed}
        before = files
    return out
