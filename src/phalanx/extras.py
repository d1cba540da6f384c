"""Optional parts of Phalanx that live in pip extras, and the one message a user gets without them.

The base install runs and tracks experiments on this machine. The Kubernetes engines, plots and the
PostgreSQL store need heavy libraries (about 230, 120 and 10 MB) that a laptop which only tracks
should not carry, so they are extras; a command that needs one imports it through ``require`` and
answers "pip install 'phalanx[EXTRA]'" (exit 2) instead of a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from phalanx.errors import MissingExtra

# extra -> the modules it brings (what `require` may be asked for)
EXTRAS: dict[str, tuple[str, ...]] = {
    "kubernetes": ("kubernetes", "kubernetes_validate", "jsonschema"),
    "plot": ("matplotlib",),
    "postgres": ("psycopg",),
    "search": ("optuna",),  # phalanx group run: samplers and pruners
    "s3": ("s3fs",),  # PHALANX_ARTIFACTS_URL=s3://..., s3:// datastores
    "teams": ("pwdlib", "argon2"),  # users' passwords on a team server (argon2 hashes)
    "ray": ("ray",),  # the Ray engine: a placement group and an actor per replica
    "services": ("tensorboard", "jupyterlab"),
    "serve": (
        "onnxruntime",
        "prometheus_client",
        "numpy",
    ),  # phalanx serve, a served model service  # TensorBoard and notebooks as services (docs/services.md)
}


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` (part of ``extra``), or raise MissingExtra naming the command to install it.

    ``purpose`` completes "... needs ...", e.g. "phalanx plot".
    """
    if module.split(".")[0] not in EXTRAS[extra]:
        raise ValueError(f"{module} is not part of the {extra!r} extra")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or module
        if not missing.startswith(module.split(".")[0]) and exc.name is not None:
            raise  # the module is there but one of its own imports is broken: show that
        raise MissingExtra(extra, purpose) from exc
