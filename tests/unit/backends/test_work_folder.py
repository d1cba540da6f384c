"""A replica's work folder, checked as each of its groups starts (a restart, a start after a wait in
the queue): gone, replaced by a file or closed to this account is a one-line reason, not the
traceback of a fork or of Popen."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phalanx.backends.local.leaders import check_work_folder
from phalanx.errors import UsageError


def test_a_folder_that_is_there_and_may_be_entered_passes(tmp_path: Path) -> None:
    check_work_folder(str(tmp_path), "master", boxed=False)


@pytest.mark.parametrize("how", ["removed", "a file"])
def test_a_folder_gone_or_replaced_by_a_file_is_named(tmp_path: Path, how: str) -> None:
    work = tmp_path / "work"
    if how == "a file":
        work.write_text("")
    with pytest.raises(UsageError, match=f"the work folder {work} is gone or no longer a folder") as refused:
        check_work_folder(str(work), "worker-1", boxed=False)
    assert "worker-1 cannot start there" in str(refused.value)


def test_a_folder_this_account_may_not_enter_is_named_unless_the_box_enters_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # chmod 000 does not stop root (this suite's CI account): the kernel's answer is what is asked
    monkeypatch.setattr(os, "access", lambda path, mode: not (path == str(tmp_path) and mode == os.X_OK))
    with pytest.raises(UsageError, match="cannot be entered"):
        check_work_folder(str(tmp_path), "master", boxed=False)
    check_work_folder(str(tmp_path), "master", boxed=True)  # its own account, checked in its box
