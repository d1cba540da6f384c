"""`task.load_checkpoint` on a checkpoint whose file is gone (retention removed it, the artifact
store was cleaned) says so instead of handing back a Path that the script then indexes."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.checkpoints import Checkpoint
from phalanx.tracking import checkpointing


@pytest.mark.parametrize("name", ["step-000000003.pkl", "step-000000003.pt", "step-000000003-weights"])
def test_loading_a_checkpoint_whose_file_is_gone_raises_naming_it(tmp_path: Path, name: str) -> None:
    gone = Checkpoint("checkpoint-3", 3, str(tmp_path / name), {"loss": 0.5})
    with pytest.raises(FileNotFoundError) as info:
        checkpointing.load(None, gone)  # type: ignore[arg-type]
    assert "checkpoint-3" in str(info.value) and name in str(info.value)


def test_a_pickled_checkpoint_and_a_folder_still_load(tmp_path: Path) -> None:
    import pickle

    (tmp_path / "step-000000001.pkl").write_bytes(pickle.dumps({"epoch": 1}))
    folder = tmp_path / "step-000000002-state"
    folder.mkdir()
    one = Checkpoint("checkpoint-1", 1, str(tmp_path / "step-000000001.pkl"), {})
    two = Checkpoint("checkpoint-2", 2, str(folder), {})
    assert checkpointing.load(None, one) == {"epoch": 1}  # type: ignore[arg-type]
    assert checkpointing.load(None, two) == folder  # type: ignore[arg-type]
