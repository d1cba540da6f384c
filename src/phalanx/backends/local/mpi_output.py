"""Split mpirun's merged, ``--tag-output`` stream back into each rank's own lines.

Open MPI tags what it *reads* from a rank, not whole lines: every chunk starts with the rank's tag
(``[1,R]<stdout>:``) and every newline inside a chunk is followed by the tag again. A rank that
writes a line in two pieces (Python's unbuffered ``print`` writes the text, then ``"\\n"``) can
therefore have another rank's chunk land in the middle of its line::

    [1,0]<stdout>:epoch 0[1,1]<stdout>:epoch 0[1,1]<stdout>:
    [1,0]<stdout>:

Cutting at newlines alone glued rank 1's words into rank 0's line. Here each (rank, stream) keeps
its own partial line, and a line ends where that rank's newline came.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_TAG = re.compile(r"\[\d+,(\d+)\]<(stdout|stderr)>:")


class TaggedStream:
    """Feed the file's lines (newlines removed) in order; get ``(rank, text)`` per complete line,
    ``rank`` None for mpirun's own untagged words."""

    def __init__(self) -> None:
        self._partial: dict[tuple[int, str], str] = {}

    def feed(self, line: str) -> Iterator[tuple[int | None, str]]:
        pieces = _TAG.split(line)  # [untagged, rank, stream, text, rank, stream, text, ...]
        if pieces[0] or len(pieces) == 1:
            yield None, pieces[0]  # text before any tag on a fresh line is mpirun's own
        tagged = [(int(pieces[i]), pieces[i + 1], pieces[i + 2]) for i in range(1, len(pieces), 3)]
        for n, (rank, stream, text) in enumerate(tagged):
            key = (rank, stream)
            if n == len(tagged) - 1:  # the newline that ended this file line was this rank's
                yield rank, self._partial.pop(key, "") + text
            else:
                self._partial[key] = self._partial.get(key, "") + text

    def close(self) -> Iterator[tuple[int | None, str]]:
        """The lines a rank left unfinished when the stream ended."""
        for (rank, _), text in sorted(self._partial.items()):
            yield rank, text
        self._partial.clear()


# What mpirun says about the rank that ended the job (Open MPI 4 and 5):
#   Process name: [[8592,1],1]      then      Exit code:    1
#   mpirun noticed that process rank 1 with PID 4242 on node vm exited on signal 9 (Killed).
_PROCESS_NAME = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]")
_EXIT_CODE = re.compile(r"Exit code:\s*(-?\d+)")
_SIGNALLED = re.compile(
    r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)(?: \(([^)]*)\))?"
)
KEEP_LINES = 10


@dataclass(frozen=True)
class RankFailure:
    """The rank whose failure ended an mpirun job, and its own last lines (its Python traceback),
    which say why far better than mpirun's "Primary job terminated normally, but 1 process
    returned a non-zero exit code" boilerplate."""

    rank: int
    what: str  # "exited with code 1", "was killed by signal 9 (Killed)"
    last: tuple[str, ...]

    def reason(self) -> str:
        text = f"(rank {self.rank}) {self.what}"
        if self.last:
            text += "; last lines of its log:\n" + "\n".join(f"  {line}" for line in self.last)
        return text


def rank_failure(lines: Iterable[str], keep: int = KEEP_LINES) -> RankFailure | None:
    """Which rank failed, from an mpirun ``--tag-output`` log (its lines, newlines removed): the rank
    mpirun's summary names, else the last rank that printed a Python traceback. None when neither."""
    stream = TaggedStream()
    tails: dict[int, deque[str]] = defaultdict(lambda: deque(maxlen=keep))
    own: deque[str] = deque(maxlen=200)  # mpirun's own words: its summary comes last
    traceback_by: int | None = None

    def take(pairs: Iterable[tuple[int | None, str]]) -> None:
        nonlocal traceback_by
        for rank, text in pairs:
            if rank is None:
                own.append(text)
            elif text.strip():
                tails[rank].append(text)
                if text.startswith("Traceback (most recent call last)"):
                    traceback_by = rank

    for raw in lines:
        take(stream.feed(raw))
    take(stream.close())
    summary = "\n".join(own)
    named = _PROCESS_NAME.search(summary)
    signalled = _SIGNALLED.search(summary)
    if named is not None:
        rank = int(named.group(1))
        code = _EXIT_CODE.search(summary, named.end())
        what = f"exited with code {code.group(1)}" if code else "failed"
    elif signalled is not None:
        rank = int(signalled.group(1))
        name = f" ({signalled.group(3)})" if signalled.group(3) else ""
        what = f"was killed by signal {signalled.group(2)}{name}"
    elif traceback_by is not None:
        rank, what = traceback_by, "raised an exception"
    else:
        return None
    return RankFailure(rank, what, tuple(tails.get(rank, ())))
