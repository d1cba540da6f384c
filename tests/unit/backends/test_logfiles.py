"""The one log-file follower of the local and Slurm engines: from an offset, to the end of what is
there, or (following) until the replica has ended, with no line written before the end missed."""

from __future__ import annotations

import threading
from pathlib import Path

from phalanx.backends.logfiles import Lines, follow_file


def test_without_follow_it_reads_what_is_there_from_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    log.write_bytes(b"old\nline 1\nline \xff2\npartial")
    assert list(follow_file(log, offset=4)) == ["line 1", "line \ufffd2", "partial"]
    assert list(follow_file(tmp_path / "missing.log")) == []


def test_following_reads_until_ended_including_what_was_written_just_before(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    ended = threading.Event()
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(follow_file(log, 0, ended.is_set, poll=0.01)))
    reader.start()
    with open(log, "ab") as f:  # created after the reader started
        for i in range(50):
            f.write(f"step {i}\n".encode())
            f.flush()
        f.write(b"last words")
    ended.set()
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert lines == [f"step {i}" for i in range(50)] + ["last words"]


def test_a_line_without_end_comes_in_pieces_and_whole_lines_as_they_were() -> None:
    """A pod's or a Slurm job's stream: a line that never ends (a progress bar, 8 GiB of zeros) is
    given in pieces of ``most`` bytes, not held (and copied) whole."""
    lines = Lines(most=4)
    assert lines.feed(b"ab\ncd") == [b"ab"]
    assert lines.feed(b"efghij") == [b"cdef"]
    assert lines.feed(b"\n\nxyz") == [b"ghij", b""]
    assert lines.end() == [b"xyz"] and lines.end() == []
