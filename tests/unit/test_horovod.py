"""Horovod's build: keyed by what goes into it, a prebuilt wheel honoured, a missing toolchain named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx import horovod
from phalanx.errors import UsageError


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


def test_the_experiments_torch_pin_is_found() -> None:
    assert horovod.torch_pin_of(["numpy", "torch==2.13.0+cu126"]) == "2.13.0+cu126"
    assert horovod.torch_pin_of(["numpy"]) is None


def _lines(replica: str, raw: str, ranks_per_replica: int = 1) -> list[str]:
    """What ``replica`` shows of an mpirun unit whose log file holds ``raw``."""
    from phalanx.backends.local.engine import LocalBackend

    return list(LocalBackend._unit_lines(iter(raw.split("\n")), _unit(ranks_per_replica), replica))


def _unit(ranks_per_replica: int) -> Any:
    from phalanx.backends.local.units import StartedUnit as _Unit

    return _Unit("master", ["master", "worker-0"], 1, "", "", "", 0, ranks_per_replica=ranks_per_replica)


def test_mpirun_lines_go_to_the_replica_of_their_rank() -> None:
    raw = "[1,0]<stdout>:epoch 0\n[1,1]<stderr>:boom\nmpirun noticed that ..."
    assert _lines("master", raw) == ["[rank 0] epoch 0", "mpirun noticed that ..."]
    assert _lines("worker-0", raw) == ["[rank 1] boom"]
    assert _lines("master", raw, ranks_per_replica=2) == [
        "[rank 0] epoch 0",
        "[rank 1] boom",
        "mpirun noticed that ...",
    ]


def test_a_line_written_in_two_pieces_is_not_glued_to_another_ranks_line() -> None:
    # What Open MPI 4.1 wrote in CI: each rank's print() came as the text, then "\n", and rank 1's
    # chunks landed between rank 0's two; the newline that ends a file line is the last tag's.
    raw = (
        "[1,0]<stdout>:2 ranks, 674 samples here[1,1]<stdout>:2 ranks, 673 samples here[1,1]<stdout>:\n"
        "[1,0]<stdout>:\n"
        "[1,0]<stdout>:epoch 0[1,0]<stderr>:warning\n"
        "[1,0]<stdout>: done\n"
        "[1,1]<stdout>:cut short"
    )
    assert _lines("master", raw) == [
        "[rank 0] 2 ranks, 674 samples here",
        "[rank 0] warning",
        "[rank 0] epoch 0 done",
    ]
    assert _lines("worker-0", raw) == ["[rank 1] 2 ranks, 673 samples here", "[rank 1] cut short"]


def test_a_line_that_already_names_its_rank_is_not_labelled_twice() -> None:
    # The Horovod example (like most Horovod scripts) prints "[rank N] ..." itself.
    raw = "[1,0]<stdout>:[rank 0] final test accuracy: 0.95\n[1,1]<stdout>:[rank 0] is what rank 1 says"
    assert _lines("master", raw) == ["[rank 0] final test accuracy: 0.95"]
    assert _lines("worker-0", raw) == ["[rank 1] [rank 0] is what rank 1 says"]  # not its own rank


def test_a_killed_builds_work_folder_is_swept_before_the_next_build_of_its_key(tmp_path: Path) -> None:
    for name in (".horovod-k1-abc", ".horovod-k1-def", ".horovod-k2-abc", "horovod-k1"):
        (tmp_path / name / "sub").mkdir(parents=True)
    (tmp_path / ".horovod-k1.lock").touch()
    horovod._sweep(tmp_path, "k1")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".horovod-k1.lock", ".horovod-k2-abc", "horovod-k1"]
