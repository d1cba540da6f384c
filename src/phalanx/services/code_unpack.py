"""`python -m phalanx.services.code_unpack FOLDER`: a notebook's code bundle, read from standard
input, unpacked into FOLDER in place of what was there (docs/services.md).

On a server that boxes, it runs in the project's box as the project's account: the folder it
replaces lies in the project's notebook folder, which that account may write, so unpacking there as
root could follow a link the account planted. Exit status 2 with the reason for a bundle that is
not one (phalanx.bundles refuses members outside the folder and archives past the cap).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from phalanx.bundles import unpack
from phalanx.errors import UsageError


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m phalanx.services.code_unpack FOLDER < bundle.tar.gz\n")
        return 2
    folder = Path(argv[0])
    data = sys.stdin.buffer.read()
    try:
        if folder.is_symlink():  # a link planted in its place: removed, never followed
            folder.unlink()
        shutil.rmtree(folder, ignore_errors=True)
        files = unpack(data, folder)
    except UsageError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    sys.stdout.write(f"{files}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
