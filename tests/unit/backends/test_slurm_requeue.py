"""What the Slurm engine does when Slurm runs a job again by itself (requeue), without a cluster."""

from __future__ import annotations

from pathlib import Path

from phalanx.backends.slurm_logs import LogFile


def test_a_log_file_replaced_by_a_requeued_attempt_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "master.log"
    path.parent.mkdir()
    path.write_text("attempt 0 starts\nstep 1 of the first attempt, a long line\n")
    log = LogFile(path, "")
    assert log.read(final=False) == ["attempt 0 starts", "step 1 of the first attempt, a long line"]
    archive = tmp_path / "attempts" / "0"
    archive.mkdir(parents=True)
    path.parent.rename(archive / "logs")  # what the requeued job's script does
    path.parent.mkdir()
    path.write_text("attempt 1 starts\n")  # shorter than what was read of the first file
    assert log.read(final=False) == ["attempt 1 starts"]
    with path.open("a") as f:
        f.write("step 1\n")
    assert log.read(final=True) == ["step 1"]
