"""`phalanx server` keeps its home its own account's alone (mode 0700): the store, every project's
logs and files lie there with the umask's modes (server.private_home, docs/security.md)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from phalanx.server.private_home import keep_private


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_home_is_made_0700(tmp_path: Path) -> None:
    home = tmp_path / "srv" / "phalanx"
    assert keep_private(home) is None
    assert home.is_dir() and _mode(home) == 0o700


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o711, 0o777])
def test_a_home_others_may_enter_is_tightened_and_what_is_in_it_is_kept(tmp_path: Path, mode: int) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "runs").mkdir()
    (home / "phalanx.db").write_bytes(b"")
    home.chmod(mode)
    assert keep_private(home) is None
    assert _mode(home) == 0o700
    assert sorted(p.name for p in home.iterdir()) == ["phalanx.db", "runs"]


def test_a_home_already_private_is_left_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    home.chmod(0o500)  # its owner's choice: read-only for itself too
    assert keep_private(home) is None
    assert _mode(home) == 0o500
    home.chmod(0o700)


def test_a_home_of_another_account_is_left_as_it_is_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    monkeypatch.setattr(os, "geteuid", lambda: home.stat().st_uid + 1)
    warning = keep_private(home)
    assert warning is not None and str(home) in warning and "chmod 700" in warning
    assert _mode(home) == 0o755


def test_a_home_whose_mode_cannot_be_changed_gets_a_warning_never_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)

    def refused(*_args: object, **_kwargs: object) -> None:
        raise PermissionError("read-only file system")

    monkeypatch.setattr(os, "chmod", refused)
    assert "chmod 700" in (keep_private(home) or "")


def test_a_home_in_a_tree_every_box_sees_whole_keeps_its_mode_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A box binds /usr, /etc and /opt from the machine as they are: a job's account walks through
    the real folders to its own, so a 0700 home there would lock every boxed job out."""
    opt = tmp_path / "opt"
    monkeypatch.setattr("phalanx.server.private_home.MACHINE_TREES", (str(opt),))
    new = opt / "phalanx"
    was = os.umask(0o022)  # most accounts' umask, whatever this process's is
    try:
        said = keep_private(new)
    finally:
        os.umask(was)
    assert said is not None and "put PHALANX_HOME elsewhere" in said
    assert new.is_dir() and _mode(new) & 0o055 == 0o055  # others may walk through (the umask's 0755)
    old = opt / "old"
    old.mkdir(mode=0o755)
    old.chmod(0o755)
    assert keep_private(old) is not None and _mode(old) == 0o755
