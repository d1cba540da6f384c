"""A boxed program's environment, handed over only once it runs as its project's account.

bubblewrap and setpriv run as root before the box drops to the account, and the dynamic loader
honours ``LD_PRELOAD``, ``LD_LIBRARY_PATH`` and their kin for a root program that was not started
setuid: a variable a user wrote (an experiment file's ``env:``, a build's ``env_vars``) in their
environment would run that user's code as root, outside any box. So they start with a trusted
environment of Phalanx's own (a PATH), and the box's program is preceded by a shell that, already as
the account, exports the variables from an unlinked file the account owns, given as its standard
input (never on a command line, where any process could read a secret among them; nor on a
descriptor the program would keep), and then becomes the program, its input /dev/null.

Standard library only: the reaper (phalanx.backends.local.reaper) boxes replicas with it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping

TYPE_CHECKING = False  # without importing typing: a replica's reaper imports this module
if TYPE_CHECKING:
    from typing import IO

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # what a shell can export
# "$@": the program. `set -a` exports every assignment the file (its standard input) makes
APPLY = 'set -a; . /dev/stdin; set +a; exec "$@" </dev/null'
SHELL = "/bin/sh"
TRUSTED_PATH = "/usr/local/bin:/usr/bin:/bin"  # all bubblewrap and setpriv get (both named by path)


def handed(program: list[str], env: Mapping[str, str], uid: int, gid: int) -> tuple[list[str], IO[bytes]]:
    """(``program`` preceded by the shell that exports ``env``, the file it reads them from). Start
    the result with the file as its standard input and close the file once it has started.
    ValueError for a name no shell can export (say which)."""
    import tempfile  # why: with shutil and random, only when a box's program is handed its variables

    held = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the caller once the program started)
    try:
        for name, value in env.items():
            if not NAME.fullmatch(name):
                raise ValueError(
                    f"environment variable {name!r}: a name is letters, digits and '_', not led by a digit"
                )
            held.write(f"{name}={shlex.quote(value)}\n".encode("utf-8", "surrogateescape"))
        held.flush()
        held.seek(0)
        os.fchown(held.fileno(), uid, gid)  # the account reopens it (/dev/stdin): it must own it
    except BaseException:
        held.close()
        raise
    return [SHELL, "-c", APPLY, "phalanx-env", *program], held
