"""A box for code a server runs on behalf of its users: its own identity and namespaces.

A replica of a server-run experiment (and the build of its venv, and the package listing taken
from that venv) starts as::

    bwrap --die-with-parent --new-session --unshare-pid --unshare-ipc <mounts> --chdir CWD \\
        -- setpriv --reuid UID --regid GID --clear-groups --no-new-privs --bounding-set=-all \\
           --inh-caps=-all -- <the replica's argv>

bubblewrap (Debian's ``bubblewrap``, what Flatpak uses) runs as root only long enough to build
a new mount namespace from a declared list (the machine's libraries read-only, the experiment's
own folders, nothing else) and a PID namespace; util-linux's ``setpriv`` then drops to the
project's unprivileged account for good (no capabilities, no supplementary groups, no
set-uid escalation) right before the user's program runs. Why not util-linux ``unshare`` alone:
it makes namespaces but no mount layout, which would be hand-written mount calls here; why not
bubblewrap as the unprivileged user: that needs unprivileged user namespaces, which many
hardened hosts turn off, and files the box writes would then belong to a mapped id.

Everything is bound at the path it has on the host (a venv's scripts name their interpreter by
absolute path), so the box sees the same paths, and only those: the server's home, store, keys,
other experiments' folders and other processes do not exist in it, nor do other projects'
accounts in its /etc/passwd and /etc/group (``box_accounts``) or other boxes' cgroups under
/sys/fs/cgroup (an empty tmpfs there, its own cgroup bound in: ``with_cgroup``). Standard library
only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from phalanx import knobs

BWRAP = "bwrap"
SETPRIV = "setpriv"
# The machine's programs and libraries, read-only. /etc holds the loader's cache, CA certificates,
# passwd/group (name lookups: copies without the other projects' accounts, box_accounts) and Open
# MPI's defaults; what in it is secret is root's and mode 0600/0640, which the box's account cannot
# read, and the server's own paths are hidden on top.
MACHINE_TREES = ("/usr", "/etc", "/opt")
MERGED_USR = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The box's own environment, whatever the server's holds: set by Phalanx, never inherited.
BOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Inherited from the process that starts the box when set there: locale and time zone only.
INHERITED = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ")
# GPUs: /dev/nvidia<N> per granted device plus these control nodes (knobs.GPU_DEVICES_DIR names
# another folder to take them from: a test's fake nodes).
GPU_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
# Every cgroup of the machine: an empty tmpfs in a box, but for its own (with_cgroup)
CGROUPS = "/sys/fs/cgroup"
# Mark of a boxed process (its value: the box folder), how the tests' clean-up finds leftovers.
ENV_BOX = "PHALANX_BOX"


@dataclass(frozen=True)
class Isolation:
    """How one project's server-run code is boxed (chosen by the server: server.boxing).

    ``account``/``uid``/``gid``: the project's unprivileged OS identity; ``report_to``: the
    server's URL on this machine, where replicas send their records with their experiment's
    write-only token; ``hidden``: server paths masked should they lie under a machine tree (its
    home, its token file); ``extra_ro``: paths an admin lets every box read; ``pids_max``: the
    most processes (and threads) one replica may have."""

    account: str
    uid: int
    gid: int
    project: str
    report_to: str
    hidden: tuple[str, ...] = ()
    extra_ro: tuple[str, ...] = ()
    pids_max: int = 4096

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Isolation:
        """As ``to_json`` wrote it (a group's options, a launch record)."""
        return cls(
            account=str(doc["account"]),
            uid=int(doc["uid"]),
            gid=int(doc["gid"]),
            project=str(doc["project"]),
            report_to=str(doc["report_to"]),
            hidden=tuple(str(p) for p in doc.get("hidden") or ()),
            extra_ro=tuple(str(p) for p in doc.get("extra_ro") or ()),
            pids_max=int(doc.get("pids_max") or 4096),
        )


def isolation_of(doc: Mapping[str, Any] | None) -> Isolation | None:
    """The isolation a record names (None: the run was not boxed)."""
    found = (doc or {}).get("isolation")
    return Isolation.from_json(found) if isinstance(found, Mapping) else None


@dataclass(frozen=True)
class Layout:
    """What one box sees besides the machine's libraries: ``rw`` and ``ro`` host paths bound at
    the same path; ``tmp`` bound at /tmp, ``shm`` at /dev/shm; ``devices``: device nodes bound at
    /dev/<name>; ``cwd``: where the program starts; ``tmp`` None: a small tmpfs of its own;
    ``network`` False: a network namespace of its own, with only a loopback (a program that
    reports nothing over HTTP: the registry's parity check)."""

    cwd: str
    tmp: str | None
    rw: tuple[str, ...] = ()
    ro: tuple[str, ...] = ()
    shm: str | None = None
    devices: tuple[str, ...] = field(default_factory=tuple)
    network: bool = True


def box_folder(home: Path, experiment_id: str) -> Path:
    """An experiment's own folder for its boxes (``<home>/boxes/<id>``): each replica's home and
    /tmp, and the spool its SDK writes before shipping it; owned by the box's account."""
    return home / "boxes" / experiment_id


def missing_tools() -> list[str]:
    """The programs a box needs that this machine lacks (empty: it can box)."""
    return [tool for tool in (BWRAP, SETPRIV) if shutil.which(tool) is None]


def interpreter_trees(python: str | None = None) -> tuple[str, ...]:
    """What a Python program in the box needs of this machine besides MACHINE_TREES: Phalanx's own
    interpreter (its venv and the base installation it was made from) and ``python``'s venv."""
    trees = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    if python:
        venv = Path(python).parent.parent
        if (venv / "pyvenv.cfg").exists():
            trees.add(str(venv))
    return tuple(sorted(t for t in trees if t and not _under(t, MACHINE_TREES)))


def box_argv(isolation: Isolation, layout: Layout) -> list[str]:
    """The argv prefix that runs a program in the box (the program's argv follows it)."""
    from phalanx.machine import box_accounts  # why: boxed runs only: a local run reads no accounts

    argv = [
        shutil.which(BWRAP) or BWRAP,
        "--die-with-parent",  # the box ends with the process that started it (its reaper)
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
    ]
    if not layout.network:
        argv.append("--unshare-net")
    for tree in MACHINE_TREES:
        if os.path.isdir(tree):
            argv += ["--ro-bind", tree, tree]
    # its account database without the other projects' accounts (a server path hidden wins: below)
    argv += box_accounts.account_binds(isolation.account, isolation.uid, isolation.gid)
    for link in MERGED_USR:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    for path in isolation.hidden:
        if _under(path, MACHINE_TREES) and os.path.lexists(path):
            argv += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    # /tmp first: what is bound below it (a folder of the server's under /tmp) is mounted on top
    argv += ["--bind", layout.tmp, "/tmp"] if layout.tmp else ["--tmpfs", "/tmp"]
    binds = [(p, "--ro-bind") for p in (*isolation.extra_ro, *layout.ro)]
    binds += [(p, "--bind") for p in layout.rw]
    made = {"/", "/tmp", *MACHINE_TREES}  # folders that exist in the box already
    for path, how in _ordered(binds):
        for source, target in _at(path):
            argv += _parents(target, made)
            argv += [how, source, target]
            made.add(target)
    argv += ["--proc", "/proc", "--dev", "/dev"]
    if layout.shm:
        argv += ["--bind", layout.shm, "/dev/shm"]
    for node in layout.devices:
        argv += ["--dev-bind", node, f"/dev/{Path(node).name}"]
    if os.path.isdir("/sys"):
        argv += ["--ro-bind", "/sys", "/sys"]
        if os.path.isdir(CGROUPS):  # no other box's cgroups: its own are bound in by with_cgroup
            argv += ["--tmpfs", CGROUPS]
    argv += ["--chdir", layout.cwd, "--", *drop_to(isolation)]
    return argv


def with_cgroup(argv: Sequence[str], folders: Iterable[str]) -> list[str]:
    """A box's argv (``box_argv``'s, maybe with its program after it) that also shows the box its
    own cgroup: each of ``folders`` (one per v1 controller, or the v2 one) read-only at its path,
    on top of the empty /sys/fs/cgroup, where /proc/self/cgroup says it is (a program that sizes
    its threads or caches by its limits reads them there). The box's processes must be in that
    cgroup before bubblewrap starts (its reaper joins them): the folders exist then."""
    binds: list[str] = []
    made = {CGROUPS, *(str(p) for p in Path(CGROUPS).parents)}
    for folder in folders:
        if not _under(folder, (CGROUPS,)) or not os.path.isdir(folder):
            continue
        for source, target in _at(os.path.abspath(folder)):
            binds += _parents(target, made)
            binds += ["--ro-bind", source, target]
            made.add(target)
    cut = list(argv).index("--chdir")  # bubblewrap's own, before its "--": the binds go before it
    return [*argv[:cut], *binds, *argv[cut:]]


def drop_to(isolation: Isolation) -> list[str]:
    """setpriv: the project's account, no groups, no capabilities, no way back up."""
    return [
        shutil.which(SETPRIV) or SETPRIV,
        f"--reuid={isolation.uid}",
        f"--regid={isolation.gid}",
        "--clear-groups",
        "--no-new-privs",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--",
    ]


def box_env(isolation: Isolation, home: str, path_head: Sequence[str] = ()) -> dict[str, str]:
    """The environment every boxed program starts from (the rest is added by name, never
    inherited): its PATH (``path_head`` first), a home in its own folder, its account's name."""
    head = [p for p in path_head if p]
    return {
        "PATH": os.pathsep.join([*head, BOX_PATH]),
        "HOME": home,
        "USER": isolation.account,
        "LOGNAME": isolation.account,
        "SHELL": "/bin/sh",
        "TMPDIR": "/tmp",
    }


def inherited(names: Iterable[str] = ()) -> dict[str, str]:
    """What a box takes from the starting process's environment: INHERITED plus ``names`` (a
    project's secrets, handed to the engine by name)."""
    return {k: os.environ[k] for k in (*INHERITED, *names) if k in os.environ}


def gpu_nodes(gpus: Iterable[str]) -> tuple[str, ...]:
    """The device nodes of these GPUs (indices; a UUID gives every GPU node, as its index is not
    known here) and the control nodes, those that exist."""
    folder = knobs.GPU_DEVICES_DIR.value() or Path("/dev")
    wanted = list(gpus)
    if not wanted:
        return ()
    if all(g.isdigit() for g in wanted):
        nodes = [folder / f"nvidia{g}" for g in wanted]
    else:
        nodes = sorted(p for p in folder.glob("nvidia[0-9]*") if p.name[6:].isdigit())
    nodes += [folder / name for name in GPU_CONTROL_NODES]
    caps = folder / "nvidia-caps"
    if caps.is_dir():
        nodes += sorted(caps.iterdir())
    return tuple(str(n) for n in nodes if os.path.lexists(n))


def make_own_folder(path: Path, isolation: Isolation, mode: int = 0o700) -> Path:
    """A folder only the box's account may use, made by root: created if missing, then changed
    through a descriptor opened without following a link (OSError when a link or a file stands
    there: never is a planted link's target given away)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise OSError(f"{path} exists and is not a folder") from None
    try:
        os.fchown(fd, isolation.uid, isolation.gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def hand_over(root: Path, isolation: Isolation) -> int:
    """Give a folder root unpacked (a code bundle) to the box's account, without following any
    symbolic link in it: walked by file descriptors (os.fwalk), each entry changed by name
    relative to its folder's descriptor with ``follow_symlinks=False``. Only entries owned by
    this process's user or already the box's are touched, and a regular file with several names
    (a hard link, possibly to a file elsewhere) is left as it is. Returns how many changed."""
    me = os.geteuid()
    changed = 0

    def give(name: str, dir_fd: int | None) -> None:
        nonlocal changed
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if info.st_uid not in (me, isolation.uid) or (stat.S_ISREG(info.st_mode) and info.st_nlink > 1):
            return
        if (info.st_uid, info.st_gid) != (isolation.uid, isolation.gid):
            os.chown(name, isolation.uid, isolation.gid, dir_fd=dir_fd, follow_symlinks=False)
            changed += 1

    if not root.is_dir() or root.is_symlink():
        return 0
    give(str(root), None)
    for _folder, dirs, files, fd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirs, *files):
            give(name, fd)
    return changed


def _under(path: str, trees: Iterable[str]) -> bool:
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in trees)


def _parents(target: str, made: set[str]) -> list[str]:
    """``--dir`` for each folder above ``target`` not made yet, mode 0755: left to itself,
    bubblewrap makes them 0700 (root's), and the box's account could not get through them."""
    out: list[str] = []
    for parent in reversed(Path(target).parents):
        name = str(parent)
        if name in made or _under(name, MACHINE_TREES):
            continue
        out += ["--perms", "0755", "--dir", name]
        made.add(name)
    return out


def _ordered(binds: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each path once (read-write wins), parents before their children (a bind inside another
    needs its mount point to exist first); a read-only path that does not exist, or lies under a
    machine tree, is left out."""
    chosen: dict[str, str] = {}
    for path, how in binds:
        path = os.path.abspath(path)
        if how == "--ro-bind" and (not os.path.exists(path) or _under(path, MACHINE_TREES)):
            continue  # (a read-write folder is made before the box starts: never left out)
        if chosen.get(path) != "--bind":
            chosen[path] = how
    return sorted(chosen.items(), key=lambda item: (item[0].count("/"), item[0]))


def _at(path: str) -> list[tuple[str, str]]:
    """(source, target) binds for ``path``: at its real location, and also where it is named
    when a symbolic link leads there (a published venv is a link to its build folder)."""
    real = os.path.realpath(path)
    return [(real, real)] if real == path else [(real, real), (real, path)]


def open_inside(root: Path, relative: str) -> int:
    """A file descriptor of a file below ``root`` (a folder a box may write), opened by root without
    following any symbolic link on the way: each folder opened relative to the last with
    O_NOFOLLOW, the file too. OSError (ELOOP for a link, FileNotFoundError...) otherwise."""
    parts = [p for p in Path(relative).parts if p not in ("", ".")]
    if not parts or ".." in parts or Path(relative).is_absolute():
        raise OSError(f"{relative}: not a path inside {root}")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)


def remove_inside(root: Path, relative: str) -> None:
    """Remove the folder ``relative`` below ``root`` (a folder a box may write), reached and removed
    without following any link (one planted on the way, ``attempts -> <home>/runs``, is never
    followed: root would delete what it points to). Nothing there, or a link there: nothing done."""
    parent, _, name = relative.rstrip("/").rpartition("/")
    try:
        fd = _open_folder(root, parent)
    except OSError:
        return
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            shutil.rmtree(name, dir_fd=fd, ignore_errors=True)
    except (OSError, RecursionError):  # a tree deeper than rmtree recurses stays
        return
    finally:
        os.close(fd)


def folders_inside(root: Path, relative: str) -> list[str]:
    """The names of the folders (not links) in the folder ``relative`` below ``root``, reached as
    ``open_inside`` reaches a file; none when no folder is there."""
    try:
        fd = _open_folder(root, relative)
    except OSError:
        return []
    try:
        return sorted(e.name for e in os.scandir(fd) if e.is_dir(follow_symlinks=False))
    except OSError:  # not a folder
        return []
    finally:
        os.close(fd)


def _open_folder(root: Path, relative: str) -> int:
    """``root`` itself (``relative`` empty), or what ``open_inside`` opens below it."""
    if not relative:
        return os.open(root, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY)
    return open_inside(root, relative)


def read_inside(root: Path, relative: str, most: int) -> bytes:
    """A regular file below ``root`` of at most ``most`` bytes, read as ``open_inside`` opens it
    (OSError for anything else)."""
    return _read_whole(open_inside(root, relative), relative, most)


def read_file(path: Path | str, most: int) -> bytes:
    """A regular file (through links: what a user's own file names) of at most ``most`` bytes;
    OSError for anything else. Opened without waiting for a fifo's writer."""
    return _read_whole(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), str(path), most)


def _read_whole(fd: int, name: str, most: int) -> bytes:
    """All of the file open at ``fd`` (closed here): root reads files a job may have made, and
    /dev/zero, a fifo or an 8 GiB sparse file would be read forever or fill its memory."""
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{name}: not a regular file")
        data = f.read(most + 1)
    if info.st_size > most or len(data) > most:
        raise OSError(f"{name}: larger than {most:,} bytes")
    return data


def write_new(path: Path, data: bytes, mode: int | None = None, owner: Isolation | None = None) -> None:
    """A file root makes in a folder a box may write: whatever is at ``path`` (a planted link) is
    removed first and the new file is made exclusively, never through a link (OSError when
    something is put back meanwhile). ``mode``: exactly these permissions (else 0o644 less the
    umask); ``owner``: the box's account is given it (its file alone with ``mode`` 0o600), through
    the file made, never by its name."""
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(path.name, dir_fd=fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        out = os.open(path.name, flags, 0o644 if mode is None else mode, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(out, "wb") as f:
        if mode is not None:
            os.fchmod(out, mode)  # whatever the umask took away
        if owner is not None:
            os.fchown(out, owner.uid, owner.gid)
        f.write(data)


def ended_with_parent(argv: Sequence[str]) -> list[str]:
    """``argv`` run through ``setpriv --pdeathsig SIGKILL`` where there is one: killed when the
    thread that started it ends, however that ends (a crash, SIGKILL). As it is where there is none."""
    setpriv = shutil.which(SETPRIV)
    return [setpriv, "--pdeathsig", "SIGKILL", "--", *argv] if setpriv else list(argv)
