"""Horovod's build: keyed by what goes into it, a prebuilt wheel honoured, a missing toolchain named."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx import horovod
from phalanx.errors import UsageError


def test_the_key_changes_with_torch_and_is_stable() -> None:
    assert horovod.wheel_key("2.13.0") == horovod.wheel_key("2.13.0")
    assert horovod.wheel_key("2.13.0") != horovod.wheel_key("2.13.0+cu126")


def test_a_prebuilt_wheel_from_the_environment_is_used_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = tmp_path / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"PK")
    monkeypatch.setenv("PHALANX_HOROVOD_WHEEL", str(wheel))
    assert horovod.ensure_wheel("2.13.0", lambda: pytest.fail("must not build"), cache=tmp_path) == wheel
    monkeypatch.setenv("PHALANX_HOROVOD_WHEEL", str(tmp_path / "nope.whl"))
    with pytest.raises(UsageError, match="PHALANX_HOROVOD_WHEEL"):
        horovod.ensure_wheel("2.13.0", lambda: pytest.fail("must not build"), cache=tmp_path)


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


def test_the_experiments_torch_pin_is_found() -> None:
    assert horovod.torch_pin_of(["numpy", "torch==2.13.0+cu126"]) == "2.13.0+cu126"
    assert horovod.torch_pin_of(["numpy"]) is None


def test_mpirun_lines_go_to_the_replica_of_their_rank() -> None:
    from phalanx.backends.local.engine import LocalBackend, _Unit

    unit = _Unit("master", ["master", "worker-0"], 1, "", "", "", 0, ranks_per_replica=1)
    line = LocalBackend._rank_line
    assert line(unit, "master", "[1,0]<stdout>:epoch 0") == "[rank 0] epoch 0"
    assert line(unit, "worker-0", "[1,0]<stdout>:epoch 0") is None
    assert line(unit, "worker-0", "[1,1]<stderr>:boom") == "[rank 1] boom"
    assert line(unit, "master", "mpirun noticed that ...") == "mpirun noticed that ..."
