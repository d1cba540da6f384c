"""Environment variables Phalanx sets in every replica itself. An experiment that gives one of them
(in `env:`, `build.env_vars` or an estimator's environment_variables) used to lose it without a
word, since the launcher's value wins; it is now refused, naming who sets it."""

from __future__ import annotations

_PYTORCH = "the PyTorch launcher (each replica's place in the process group)"
_MXNET = "the MXNet launcher (the parameter-server cluster)"
RESERVED: dict[str, str] = {
    **{
        name: _PYTORCH
        for name in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "GROUP_RANK",
            "NODE_RANK",
            "ROLE_RANK",
            "ROLE_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        )
    },
    "TF_CONFIG": "the TensorFlow launcher (the cluster and this replica's task)",
    **{
        name: _MXNET
        for name in (
            "DMLC_ROLE",
            "DMLC_PS_ROOT_URI",
            "DMLC_PS_ROOT_PORT",
            "DMLC_NUM_WORKER",
            "DMLC_NUM_SERVER",
            "DMLC_NODE_HOST",
            "DMLC_INTERFACE",
        )
    },
}


# PHALANX_RESUME_CHECKPOINT / _STEP / _METRICS may be given: they name the checkpoint the first attempt
# starts from (docs/checkpoints.md); Phalanx sets them itself only for restarts and `phalanx resume`.
RESUME_PREFIX = "PHALANX_RESUME_"


def reserved_reason(name: str) -> str | None:
    """Why ``name`` may not be given by the experiment, or None when it may."""
    who: str | None
    if name.startswith(RESUME_PREFIX):
        return None  # where the first attempt starts from (what an estimator's resume_from sets)
    if name.startswith("PHALANX_"):
        who = "Phalanx itself (which experiment and replica each process reports as, and where)"
    else:
        who = RESERVED.get(name)
    if who is None:
        return None
    return (
        f"{name} is set by {who} in every replica, so a value given here would be lost;"
        " remove it or choose another name"
    )
