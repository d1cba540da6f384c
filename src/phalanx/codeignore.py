"""What of an experiment's folder is its code, for every walk that packs it (the record's snapshot,
the bundle a laptop sends to a server, the Kubernetes code bundle).

Left out: version control, virtual environments and caches (``SKIP_DIRS``, and any folder holding a
pyvenv.cfg), data folders (``DATA_DIRS``), and what the folder's own ``.gitignore`` files and a
``.phalanxignore`` exclude. Both ignore files use git's pattern rules (pathspec's ``GitIgnoreSpec``):
a pattern is relative to the folder of its file, a deeper file's verdict wins, ``!pattern`` takes a
path back, and nothing inside an excluded folder comes back. They are read as files, never by
running git: the folder may be one a job wrote, and a planted ``.git/config`` could make git run a
command.
"""

from __future__ import annotations

import os
import stat

from pathspec import GitIgnoreSpec

IGNORE_FILES = (".gitignore", ".phalanxignore")
IGNORE_FILE_MAX = 1 << 20  # bytes read of one ignore file (a huge one is not a list of patterns)
# folders a script may read at run time (not version control, venvs or caches)
DATA_DIRS = frozenset({"data", "datasets", "checkpoints", "outputs", "wandb", "mlruns", "lightning_logs"})
SKIP_DIRS = DATA_DIRS | frozenset(
    {
        ".git", ".hg", ".svn", ".venv", "venv", "env", ".tox", "__pycache__", ".mypy_cache",
        ".pytest_cache", ".ruff_cache", "node_modules", ".ipynb_checkpoints",
    }
)  # fmt: skip


class IgnoreRules:
    """The ignore files met on a walk from the top, folder by folder (``add_folder`` before the
    folder's entries are asked about)."""

    def __init__(self) -> None:
        self._specs: dict[str, GitIgnoreSpec] = {}  # folder, relative to the top ("" for it)

    def add_folder(self, rel_dir: str, dir_fd: int) -> None:
        """Read the ignore files of the folder open as ``dir_fd`` (links are not followed)."""
        lines: list[str] = []
        for name in IGNORE_FILES:
            lines += _read_lines(name, dir_fd)
        if lines:
            self._specs[rel_dir] = GitIgnoreSpec.from_lines(lines)

    def ignored(self, rel: str, is_dir: bool = False) -> bool:
        """Whether ``rel`` (a path relative to the top, "/"-separated) is excluded."""
        parts = rel.split("/")
        verdict = False
        for depth in range(len(parts)):  # the top's file first: a deeper one's verdict wins
            spec = self._specs.get("/".join(parts[:depth]))
            if spec is None:
                continue
            below = "/".join(parts[depth:]) + ("/" if is_dir else "")
            result = spec.check_file(below)
            if result.include is not None:
                verdict = result.include
        return verdict


def skipped_dir(name: str) -> bool:
    """A folder left out by its name alone (the walker also leaves out venvs by their pyvenv.cfg)."""
    return name in SKIP_DIRS


def _read_lines(name: str, dir_fd: int) -> list[str]:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a fifo would block, a device never end
                return []
            return f.read(IGNORE_FILE_MAX).decode(errors="replace").splitlines()
        except OSError:
            return []
