"""How a replica's TensorBoard capture turns on at interpreter start: the variable that asks for it
and the folder whose sitecustomize acts on it, put on the replica's PYTHONPATH by the local engine
(every replica) or by the ``python -m phalanx.integrations.tensorboard`` wrapper. Apart from
``tracking.tensorboard`` so that the engine imports nothing of the capture itself (issue 42)."""

from __future__ import annotations

from pathlib import Path

ENV_CAPTURE = "PHALANX_CAPTURE_TENSORBOARD"
BOOT_DIR = Path(__file__).resolve().parent / "_boot"
