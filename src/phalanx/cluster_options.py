"""Typed options per cluster kind: what a Slurm, Kubernetes or Ray cluster may be given, and what a good
value is, said once (pydantic).

Why: `phalanx cluster add` and a hand-edited ``clusters.toml`` must refuse the same mistakes with the
same message, before anything is written or submitted (a namespace Kubernetes would reject, a relative
shared folder the nodes cannot find, a server URL without its scheme). ``Cluster`` (phalanx.clusters)
stays the flat record the engines read; ``Cluster.options`` is its typed view.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)

from phalanx.errors import UsageError

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a Kubernetes namespace (RFC 1123 label)
# a Slurm partition or account as sbatch takes it (the same rule as a project's mapping): it is
# written into the job's script, where a newline or a space would start a command of its own
SLURM_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.,-]{0,199}$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"  # a PersistentVolumeClaim's name


def _server_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("give the server's URL, e.g. http://gpu-box:8000")
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("give an absolute path every node sees, e.g. /shared/phalanx")
    return value


def _ray_address(value: str) -> str:
    host, sep, port = value.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in host:
        raise ValueError(
            "give the Ray head's address as HOST:PORT (its GCS port, `ray start --head --port`), "
            "e.g. gpu-box-1:6379, or ray://HOST:10001 for the Ray Client server"
        )
    return value


ServerUrl = Annotated[str, AfterValidator(_server_url)]
AbsolutePath = Annotated[str, AfterValidator(_absolute)]
Text = Annotated[str, StringConstraints(min_length=1)]


class _Options(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SlurmOptions(_Options):
    """A Slurm cluster: sbatch/squeue on this machine, replicas' logs in a folder every node sees."""

    kind: Literal["slurm"] = "slurm"
    partition: Annotated[str, StringConstraints(pattern=SLURM_NAME)] | None = None  # --partition
    shared_dir: AbsolutePath | None = None  # replica logs and exit codes
    slurm_conf: AbsolutePath | None = None  # SLURM_CONF for the client commands (a private cluster)
    server_url: ServerUrl | None = None  # replicas report to this Phalanx server (else the spool)


class KubernetesOptions(_Options):
    """A Kubernetes cluster: pods fetch their code from, and report to, a Phalanx server."""

    kind: Literal["kubernetes"] = "kubernetes"
    server_url: ServerUrl  # required: the pods' only way home
    namespace: Annotated[str, StringConstraints(pattern=DNS_LABEL)] | None = None
    context: Text | None = None  # kubeconfig context
    env_volume: Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN)] | None = None  # RWX PVC
    kubeflow_api: Literal["v1", "trainer-v2"] | None = None
    service_account: Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN)] | None = None


class RayOptions(_Options):
    """A Ray cluster: one placement group and an actor per replica; the nodes fetch the code from,
    and report to, a Phalanx server (no folder is shared between the boxes)."""

    kind: Literal["ray"] = "ray"
    address: Annotated[str, AfterValidator(_ray_address)]  # the head: HOST:PORT or ray://HOST:PORT
    server_url: ServerUrl  # required: where the nodes fetch the code and report
    node_dir: AbsolutePath | None = None  # each node's folder for code and environments


Options = SlurmOptions | KubernetesOptions | RayOptions
ClusterOptions = Annotated[Options, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[Options] = TypeAdapter(ClusterOptions)

_WHY = {  # pydantic's words for the constraints above, in the user's terms
    "string_pattern_mismatch": "use lowercase letters, digits and '-' (a Kubernetes name)",
    "slurm_name": "use letters, digits, '_', '.', ',' and '-', from a letter or digit (as sbatch takes it)",
    "string_too_short": "must not be empty",
    "missing": "is required",
    "extra_forbidden": "is not an option of this kind of cluster",
}


def check_options(values: Mapping[str, str | None], where: str) -> Options:
    """The typed options of one cluster (its fields, None meaning not given), or a UsageError that
    names ``where`` (the command or the file and table) and every bad value with how to fix it."""
    given = {k: v for k, v in values.items() if v is not None}
    bad = [k for k, v in given.items() if _CONTROL.search(str(v))]
    if bad:
        raise UsageError(
            f"{where}: "
            + "; ".join(f"{k} {given[k]!r}: a control character (a newline, a tab)" for k in bad)
            + " has no place in a cluster's options; write it on one line"
        )
    try:
        return _ADAPTER.validate_python(given)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"][1:] if p) or "kind"
            shown = f" {given[key]!r}" if key in given else ""
            why = _WHY.get(err["type"], str(err["msg"]).removeprefix("Value error, "))
            if err["type"] == "string_pattern_mismatch" and key == "partition":
                why = _WHY["slurm_name"]
            if err["type"] == "literal_error":
                why = str(err["msg"]).lower()
            problems.append(f"{key}{shown}: {why}")
        raise UsageError(f"{where}: " + "; ".join(problems)) from None
