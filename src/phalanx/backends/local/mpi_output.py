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
from collections.abc import Iterator

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
