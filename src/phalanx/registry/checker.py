"""The one seam through which the registry checks a model before it registers it
(phalanx.registry.service.Registry): a ``ModelChecker`` takes the ONNX file's bytes, the metadata
save_model kept with it, the project of its experiment and the name it is known by (for messages),
and answers what the check found (``Checked``): the parity figure, and the graph's signature when it
passed. Two are given, and each door picks one:

- ``check_in_process``: onnxruntime reads the file here, in the calling process. Only the embedded
  single-user mode uses it (`phalanx models register`, ``Run.register_model``, ``Model.register``
  on this machine's store, no server): the file is the user's own, written by the user's own job,
  and it is read in the user's own process with the user's own rights; a file that crashes or hangs
  onnxruntime costs that user the command they typed, as running the job did, and nobody else.
- ``phalanx.registry.parity_process.ProcessChecker``: in a short-lived process of its own, boxed in
  the project's box when the server boxes the project, else a plain child process with nothing of
  the server's environment; what every registration through a server uses (the file is an
  editor's, and the server is everybody's: docs/security.md).

A check can be told to stop (``stop``, set from another thread: a server's registration whose client
went away): a ``ProcessChecker`` then kills its process and raises ``CheckStopped``; the check here
cannot be stopped (it ends with the command that runs it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from phalanx.errors import UsageError
from phalanx.registry.parity import Parity, recheck, signature


@dataclass(frozen=True)
class Checked:
    """What the check found: the parity figure, and the graph's signature when it passed."""

    parity: Parity
    signature: dict[str, Any] | None


class CheckStopped(UsageError):
    """The check was stopped before it answered (its ``stop`` was set: the registration's client went
    away), or its registration before the version was added: nothing was registered."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"{where}: the registration was given up (its client went away) before the model was "
            "registered: its parity check was stopped and nothing was registered"
        )


class ModelChecker(Protocol):
    def __call__(
        self,
        data: bytes,
        metadata: dict[str, Any],
        project: str,
        where: str,
        stop: threading.Event | None = None,
    ) -> Checked:
        """The parity check and (when it passes) the signature of ``data``, the model ``where``
        names, of an experiment of ``project``; ``stop``, once set, ends the check (where it can be
        ended: see the module's doc).

        Raises:
            UsageError: the model keeps no example input, or names external data (``recheck``).
            ParityFailed: the check could not give an answer (its process crashed, or ran too long).
            CheckStopped: ``stop`` was set before the check answered.
        """
        ...


def check_in_process(
    data: bytes, metadata: dict[str, Any], project: str, where: str, stop: threading.Event | None = None
) -> Checked:
    """The check here, in this process (the embedded single-user mode's: see the module's doc);
    ``stop`` is not heeded (this process's own command is what ends it)."""
    parity = recheck(data, metadata)
    return Checked(parity, signature(data) if parity.passed else None)
