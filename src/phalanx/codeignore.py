"""What of an experiment's folder is its code, for every walk that packs it (the record's snapshot,
the bundle a laptop sends to a server, the Kubernetes code bundle).

Left out: version control, virtual environments and caches (``SKIP_DIRS``, and any folder holding a
pyvenv.cfg), data folders (``DATA_DIRS``), and what the folder's own ``.gitignore`` files (and, in
a git work tree, those of the folders above it up to the tree's top) and a ``.phalanxignore``
exclude. Both ignore files use git's pattern rules (pathspec's ``GitIgnoreSpec``):
a pattern is relative to the folder of its file, a deeper file's verdict wins, ``!pattern`` takes a
path back, and nothing inside an excluded folder comes back. They are read as files, never by
running git: the folder may be one a job wrote, and a planted ``.git/config`` could make git run a
command.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
        self._above: list[tuple[str, GitIgnoreSpec]] = []  # (the top's path below it, its rules)

    @classmethod
    def of_work_tree(cls, top: Path) -> IgnoreRules:
        """Rules for a walk of ``top`` that also hold the .gitignore files of the folders above it,
        up to its git work tree's top (git applies them to ``top``'s files too); none above when
        ``top`` is in no work tree."""
        rules = cls()
        top = top.resolve()
        if (top / ".git").exists():  # the work tree's own top (a repository nested in another)
            return rules
        chain: list[Path] = []
        for folder in top.parents:
            chain.append(folder)
            if (folder / ".git").exists():
                break
        else:
            return rules
        for folder in reversed(chain):  # the work tree's top first: a nearer file's verdict wins
            try:
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                lines = _read_lines(".gitignore", fd)
            finally:
                os.close(fd)
            if lines:
                rules._above.append((top.relative_to(folder).as_posix() + "/", _spec(lines)))
        return rules

    def add_folder(self, rel_dir: str, dir_fd: int) -> None:
        """Read the ignore files of the folder open as ``dir_fd`` (links are not followed)."""
        lines: list[str] = []
        for name in IGNORE_FILES:
            lines += _read_lines(name, dir_fd)
        if lines:
            self._specs[rel_dir] = _spec(lines)

    def ignored(self, rel: str, is_dir: bool = False) -> bool:
        """Whether ``rel`` (a path relative to the top, "/"-separated) is excluded."""
        parts = rel.split("/")
        verdict = False
        for prefix, spec in self._above:
            result = spec.check_file(prefix + rel + ("/" if is_dir else ""))
            if result.include is not None:
                verdict = result.include
        for depth in range(len(parts)):  # the top's file first: a deeper one's verdict wins
            here = self._specs.get("/".join(parts[:depth]))
            if here is None:
                continue
            below = "/".join(parts[depth:]) + ("/" if is_dir else "")
            result = here.check_file(below)
            if result.include is not None:
                verdict = result.include
        return verdict


def _spec(lines: list[str]) -> GitIgnoreSpec:
    """The rules of an ignore file's lines."""
    from pathspec import GitIgnoreSpec  # why: every run's snapshot walks; most folders have no ignore file

    return GitIgnoreSpec.from_lines(lines)


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
