"""Horovod's wheel key and cache: the key names the Open MPI that `mpirun --version` reports, so these
ask the real mpirun."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx import horovod
from phalanx.errors import UsageError


def test_the_key_changes_with_torch_and_is_stable() -> None:
    assert horovod.wheel_key("2.13.0") == horovod.wheel_key("2.13.0")
    assert horovod.wheel_key("2.13.0") != horovod.wheel_key("2.13.0+cu126")


def test_a_cached_wheel_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHALANX_HOROVOD_WHEEL", raising=False)
    folder = tmp_path / f"horovod-{horovod.wheel_key('2.13.0')}"
    folder.mkdir()
    (folder / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl").write_bytes(b"PK")
    got = horovod.ensure_wheel("2.13.0", lambda: pytest.fail("must not build"), cache=tmp_path)
    assert got.parent == folder


def test_a_missing_toolchain_is_named_with_the_packages_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PHALANX_HOROVOD_WHEEL", raising=False)
    monkeypatch.setattr(horovod.shutil, "which", lambda tool: None if tool == "cmake" else "/usr/bin/" + tool)
    with pytest.raises(UsageError, match=r"cmake \(cmake\).*PHALANX_HOROVOD_WHEEL"):
        horovod.ensure_wheel("2.13.0", lambda: pytest.fail("must not build"), cache=tmp_path)
