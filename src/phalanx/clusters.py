"""Named clusters: where `phalanx run --cluster NAME` sends an experiment.

They live in ``PHALANX_HOME/clusters.toml``, one table per cluster, so a user (or
``scripts/slurm-local up``) registers an engine once and names it afterwards. Read with ``tomllib``;
written by hand because the file is flat (strings only) and the standard library has no TOML writer.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.config import Settings
from phalanx.errors import Conflict, NotFound, UsageError

if TYPE_CHECKING:
    from phalanx.cluster_options import KubernetesOptions, RayOptions, SlurmOptions

KINDS = ("slurm", "kubernetes", "ray")
# v1: the training operator's PyTorchJob/TFJob/MXJob and the MPI operator's MPIJob (v2beta1);
# trainer-v2: Kubeflow Trainer's TrainJob referring to a (Cluster)TrainingRuntime.
KUBEFLOW_APIS = ("v1", "trainer-v2")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class Cluster:
    """One engine a user registered. Fields an engine does not use stay None."""

    name: str
    kind: str  # "slurm" | "kubernetes" | "ray"
    partition: str | None = None  # slurm: --partition
    account: str | None = None  # slurm: --account (a project's placement may set it per project)
    namespace: str | None = None  # kubernetes: where objects are created (default "default")
    context: str | None = None  # kubernetes: kubeconfig context
    shared_dir: str | None = None  # slurm: a folder every node sees (replica logs, exit codes)
    server_url: str | None = None  # replicas report to this Phalanx server (PHALANX_HOST)
    slurm_conf: str | None = None  # slurm: SLURM_CONF for the client commands (a private cluster)
    env_volume: str | None = None  # kubernetes: a ReadWriteMany PVC where pip environments are built once
    kubeflow_api: str | None = None  # kubernetes: "v1" (training-operator jobs, default) or "trainer-v2"
    # kubernetes: the service account a server's pods run as (one without API rights, in each
    # project's namespace); unset: the namespace's default one, its token never mounted
    service_account: str | None = None
    address: str | None = None  # ray: the head's GCS address HOST:PORT, or ray://HOST:PORT (Ray Client)
    node_dir: str | None = None  # ray: the folder on each node where code and environments are kept

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def slurm_shared_dir(self) -> str:
        """A Slurm cluster's shared folder (venvs, the SDK copy, run folders), or a UsageError saying
        how to register one."""
        if not self.shared_dir:
            raise UsageError(
                f"Slurm cluster {self.name} has no shared directory: the nodes must see the experiment's "
                "venv, the tracking SDK and its run folder. Register a folder every node mounts: "
                f"phalanx cluster add {self.name} --kind slurm --shared-dir /shared/phalanx --replace"
            )
        return self.shared_dir

    @property
    def options(self) -> SlurmOptions | KubernetesOptions | RayOptions:
        """The typed options of its kind (phalanx.cluster_options); UsageError if a value is bad."""
        from phalanx.cluster_options import check_options  # pydantic: only once a cluster is read

        return check_options({k: v for k, v in asdict(self).items() if k != "name"}, f"cluster {self.name!r}")

    def backend_for(self, plan_backend: str | None) -> str:
        """The engine module that runs a plan on this cluster (registry name).

        A Kubernetes cluster runs `backend: native` (the default) as plain Pods and Services, and
        `backend: kubeflow` / `backend: mpi` through the Kubeflow training operator. A Ray cluster
        runs every plan as one placement group and an actor per replica.
        """
        if self.kind in ("slurm", "ray"):
            return self.kind
        if plan_backend in ("kubeflow", "mpi"):
            return "trainer" if self.kubeflow_api == "trainer-v2" else "kubeflow"
        return "kubernetes"


def clusters_file(home: Path | None = None) -> Path:
    if home is None:
        home = Settings().home
    return Path(home) / "clusters.toml"


def _tables(home: Path | None) -> dict[str, Any]:
    """The file's tables as written (an absent file: none); a file that is no TOML is a UsageError."""
    path = clusters_file(home)
    if not path.exists():
        return {}
    import tomllib  # why: every supervisor imports this module; only one that names a cluster reads it

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc}); fix or remove the file") from exc


def _checked(path: Path, name: str, table: Any) -> Cluster:
    """One table of the file as a cluster, with the checks `cluster add` makes (UsageError)."""
    known = {f.name for f in fields(Cluster)} - {"name"}
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [{name}] must be a table")
    unknown = sorted(set(table) - known)
    if unknown:
        raise UsageError(f"{path}: [{name}] has unknown keys {unknown}; known: {sorted(known)}")
    if table.get("kind") not in KINDS:
        raise UsageError(f"{path}: [{name}] kind must be one of {list(KINDS)}")
    cluster = Cluster(name=name, **{k: str(v) for k, v in table.items()})
    try:
        cluster.options  # noqa: B018  a hand-edited value gets the same checks as `cluster add`
    except UsageError as exc:
        raise UsageError(
            f"{path}: [{name}] {str(exc).split(': ', 1)[1]} (fix it there, re-add it with"
            f" `phalanx cluster add {name} --replace ...`, or `phalanx cluster rm {name}`)"
        ) from None
    return cluster


def load_clusters(home: Path | None = None) -> dict[str, Cluster]:
    """Every registered cluster by name; an absent file means none. A broken file is a UsageError."""
    path = clusters_file(home)
    return {name: _checked(path, name, table) for name, table in _tables(home).items()}


def cluster_kinds(home: Path | None = None) -> dict[str, str]:
    """Each entry's kind as written, broken entries too (what a replace or a removal acts on)."""
    return {name: str(t.get("kind")) for name, t in _tables(home).items() if isinstance(t, dict)}


def usable_clusters(home: Path | None = None) -> tuple[dict[str, Cluster], list[str]]:
    """The clusters whose entries pass their checks, and why each other one does not (a broken
    entry hides itself, not its neighbours: what a server lists as its members' targets)."""
    path = clusters_file(home)
    good: dict[str, Cluster] = {}
    broken: list[str] = []
    for name, table in _tables(home).items():
        try:
            good[name] = _checked(path, name, table)
        except UsageError as exc:
            broken.append(exc.message)
    return good, broken


def get_cluster(name: str, home: Path | None = None) -> Cluster:
    clusters = load_clusters(home)
    if name not in clusters:
        known = ", ".join(sorted(clusters)) or "none registered"
        raise NotFound(f"no cluster named {name!r} (known: {known}); add one with `phalanx cluster add`")
    return clusters[name]


def _toml_str(value: str) -> str:
    # A JSON string literal is a valid TOML basic string for everything json.dumps emits.
    return json.dumps(value, ensure_ascii=False)


def _write(tables: dict[str, Any], home: Path | None) -> None:
    """The file from its tables (each a mapping of option to value), written then renamed."""
    path = clusters_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# Clusters for `phalanx run --cluster NAME` (managed by `phalanx cluster add|rm`).", ""]
    for name in sorted(tables):
        lines.append(f"[{_toml_str(name)}]")
        table = tables[name]
        for key, value in table.items() if isinstance(table, dict) else ():
            if key != "name" and value is not None:
                shown = key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_str(key)
                lines.append(f"{shown} = {_toml_str(str(value))}")
        lines.append("")
    # Write then rename, so a crash never leaves half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".clusters-", suffix=".toml")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)


def add_cluster(cluster: Cluster, home: Path | None = None, replace: bool = False) -> Cluster:
    """Register a cluster. Re-adding an existing name needs ``replace`` (scripts pass it)."""
    if not _NAME.match(cluster.name):
        raise UsageError(
            f"cluster name {cluster.name!r} is not allowed: use letters, digits, '-', '_' or '.' (max 63)"
        )
    if cluster.kind not in KINDS:
        raise UsageError(f"--kind must be one of {', '.join(KINDS)}, not {cluster.kind!r}")
    _refuse_other_kinds_options(cluster)
    if cluster.kind == "kubernetes" and not cluster.server_url:
        raise UsageError(
            "a kubernetes cluster needs --server-url: its pods fetch their code from that Phalanx server "
            "and report every metric to it (inside the cluster, e.g. http://phalanx.NAMESPACE.svc:8000)"
        )
    if cluster.kind == "ray" and not (cluster.address and cluster.server_url):
        raise UsageError(
            "a ray cluster needs --address (its head, e.g. --address gpu-box-1:6379) and --server-url: "
            "its nodes fetch the experiment's code from that Phalanx server and report every metric to "
            "it (an address every node reaches, e.g. http://gpu-box-1:8000)"
        )
    if cluster.kubeflow_api not in (None, *KUBEFLOW_APIS):
        raise UsageError(
            f"--kubeflow-api must be one of {', '.join(KUBEFLOW_APIS)}, not {cluster.kubeflow_api!r}"
        )
    cluster.options  # noqa: B018  every value checked by its kind's typed options, before writing
    tables = _tables(home)  # as written: a broken entry (this one, another) is replaced or kept as it is
    if cluster.name in tables and not replace:
        raise Conflict(f"cluster {cluster.name!r} exists; remove it first or pass --replace")
    tables[cluster.name] = cluster.to_json()
    _write(tables, home)
    return cluster


# the options that belong to one kind only: given to another, they are refused (exit 2)
_OWN_OPTIONS = {
    "slurm": {"partition": "--partition", "slurm_conf": "--slurm-conf", "shared_dir": "--shared-dir"},
    "kubernetes": {
        "namespace": "--namespace",
        "context": "--context",
        "env_volume": "--env-volume",
        "kubeflow_api": "--kubeflow-api",
    },
    "ray": {"address": "--address", "node_dir": "--node-dir"},
}


def _refuse_other_kinds_options(cluster: Cluster) -> None:
    values = asdict(cluster)
    for kind, options in _OWN_OPTIONS.items():
        given = [flag for key, flag in options.items() if values[key] and kind != cluster.kind]
        if given:
            raise UsageError(f"{' and '.join(given)}: for {kind} clusters, not {cluster.kind}")


def remove_cluster(name: str, home: Path | None = None) -> None:
    """Forget a cluster, even one whose entry is broken (the way out the checks' message names)."""
    tables = _tables(home)
    if name not in tables:
        raise NotFound(f"no cluster named {name!r} (`phalanx cluster ls`)")
    del tables[name]
    _write(tables, home)
