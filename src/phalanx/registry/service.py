"""The model registry's operations, shared by every door (`phalanx models`, ``Model``, the REST
routes, `phalanx serve`): register an experiment's ONNX model as version N of a name, resolve
``NAME[@alias|@N]``, move aliases, read a version's bytes.

Registering copies the file out of the experiment (under ``REGISTRY_ID`` in the artifact store), so
a version outlives the experiment it came from, and re-runs save_model's ONNX check on the copied
bytes first (phalanx.registry.parity): a file altered or corrupted since it was saved is refused
with its parity figure, and nothing is recorded. Where the check runs is the door's to say, through
the one seam of phalanx.registry.checker (``checker``): a server's runs it in a process of its own,
in the project's box when it boxes the project (phalanx.registry.parity_process); the embedded
single-user mode in the user's own process.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from phalanx.data.lineage import inputs_of
from phalanx.errors import NotFound, UsageError
from phalanx.registry.checker import CheckStopped, ModelChecker
from phalanx.registry.parity import Parity, ParityFailed
from phalanx.store.registry import registry_store
from phalanx.store.registry_records import (
    ModelRef,
    ModelVersion,
    RegisteredModel,
    check_alias,
    check_model_name,
    parse_ref,
)

if TYPE_CHECKING:
    from phalanx.domain import Experiment
    from phalanx.store.base import LocalStore, ModelRecord
    from phalanx.store.registry import RegistryStore

# the artifact store's folder for the registry's copies (experiment ids are 12 hex digits: no clash)
REGISTRY_ID = "_registry"


class Registry:
    """The registry over ``store`` (the SQL store, SQLite or PostgreSQL, with its artifact store).
    ``checker``: how ``register`` checks a model (phalanx.registry.checker); a registry opened
    without one reads and changes versions but registers none (no door checks in a place it did not
    choose)."""

    def __init__(self, store: LocalStore, checker: ModelChecker | None = None) -> None:
        self.checker = checker
        self.sql: RegistryStore = registry_store(store)
        if store.artifact_store is None:
            raise UsageError("the model registry needs an artifact store to keep the models' files in")
        self.store = store
        self.artifacts = store.artifact_store

    # --- register ---------------------------------------------------------------------------

    def register(
        self,
        source: str,
        name: str,
        *,
        description: str | None = None,
        tags: Mapping[str, str] | None = None,
        may_add: Callable[[str | None], None] | None = None,
        stop: threading.Event | None = None,
    ) -> ModelVersion:
        """Register ``EXPERIMENT[/MODEL]``'s ONNX model as the next version of ``name``.
        ``may_add``: a door's access rule, called with the project ``name`` belongs to (None: a new
        name) under the name's lock as the version is added, after the check (which may take
        minutes); what it raises refuses the registration, and nothing is recorded. ``stop``
        (another thread's, a server's whose client went away): once set, the check is stopped and
        nothing is recorded; a version already being added (its file stored, then its row) is added.

        Raises:
            NotFound: no such experiment or model.
            UsageError: the experiment has several ONNX models and none was named; the model keeps
                no example input to re-check.
            ParityFailed: the stored file does not compute what it did when it was saved.
            CheckStopped: ``stop`` was set before the version was being added.
            TypeError: the registry was opened without a checker (a door's mistake).
        """
        if self.checker is None:
            raise TypeError("this Registry was opened without a checker: pass one to register models")
        check_model_name(name)
        experiment_text, _, model_text = source.partition("/")
        experiment = self.store.get_experiment(experiment_text)
        record = self._onnx_record(experiment.id, model_text or None)
        data = self.artifacts.read_bytes(experiment.id, record.path)
        metadata = dict(record.metadata)
        digest = hashlib.sha256(data).hexdigest()
        where = f"{experiment.id}/{record.name}"
        checked = self.checker(data, metadata, experiment.project, where, stop=stop)
        if stop is not None and stop.is_set():  # it was given up as its check answered
            raise CheckStopped(where)
        parity = checked.parity
        saved_digest = metadata.get("sha256")
        if saved_digest and saved_digest != digest and parity.passed:
            # the numbers still agree on the one example, but the bytes are not the ones checked
            raise ParityFailed(
                f"{experiment.id}/{record.name}: the stored file is not the one save_model checked "
                f"(sha256 {digest[:12]}… != {str(saved_digest)[:12]}…; parity {parity.figure()}); "
                "refusing to register it"
            )
        if not parity.passed:
            raise ParityFailed(
                f"{experiment.id}/{record.name}: the stored ONNX file fails its parity check "
                f"({parity.figure()}): it was altered or corrupted after it was saved; refusing to "
                "register it. Save the model again (task.save_model) and register the new file"
            )
        lineage = self._lineage(experiment, record, metadata, parity)
        fields = {
            "experiment_id": experiment.id,
            "source": record.name,
            "path": "",
            "sha256": digest,
            "size": len(data),
            "signature": checked.signature,
            "lineage": lineage,
            "description": description,
            "tags": dict(tags or {}),
        }
        # the file first, under a name of its own (content-addressed), then the row that points to it:
        # a crash between the two leaves an unreferenced file, never a version without its file. The
        # upload runs before the transaction (no lock held while it moves); under the name's lock the
        # file is only checked, and put again if a removal of the last version naming it took it
        # meanwhile (see remove). A registration refused there (``may_add``) or failing after the
        # copy takes it away again, under the same lock, unless a version of the same bytes names it
        path = f"{name}/{digest}.onnx"

        def keep_file() -> None:
            if not self.artifacts.exists(REGISTRY_ID, path):
                self.artifacts.put_bytes(REGISTRY_ID, path, data)

        try:
            self.artifacts.put_bytes(REGISTRY_ID, path, data)
            version = self.sql.add_version(
                name,
                {**fields, "path": path},
                project=experiment.project,
                keep_file=keep_file,
                may_add=may_add,
            )
        except Exception:
            with contextlib.suppress(Exception):  # the refusal or failure is the answer, not this
                self.sql.drop_unnamed(name, [path], self._drop_files)
            raise
        return self.sql.get_version(name, version)

    def _lineage(
        self, experiment: Experiment, record: ModelRecord, metadata: Mapping[str, Any], parity: Parity
    ) -> dict[str, Any]:
        """Where a version comes from: its experiment, what it ran with and reached, and its check."""
        return {
            "experiment": {"id": experiment.id, "name": experiment.name, "project": experiment.project},
            "status": str(experiment.status),
            "model": metadata.get("model", record.name),
            "replica": record.replica,
            "params": self._params(experiment.id),
            "metrics": self._final_metrics(experiment.id),
            "snapshot": self._snapshot(experiment.id),
            # the data it read (issue 26's inputs: dataset version and digest, or a datastore path)
            "inputs": inputs_of(experiment.plan),
            "parity": parity.as_dict(),
            "saved_check": metadata.get("check"),
            "exporter": metadata.get("exporter"),
            "opset": metadata.get("opset"),
        }

    def _drop_files(self, paths: list[str]) -> None:
        for path in paths:
            self.artifacts.delete(REGISTRY_ID, path)

    def _onnx_record(self, experiment_id: str, model: str | None) -> ModelRecord:
        records = [r for r in self.store.models(experiment_id) if r.format == "onnx"]
        if model is not None:
            chosen = [r for r in records if r.name == model or r.metadata.get("model") == model]
            if not chosen:
                names = ", ".join(str(r.metadata.get("model", r.name)) for r in records) or "none"
                raise NotFound(
                    f"experiment {experiment_id} has no ONNX model {model!r} (ONNX models: {names})"
                )
            return chosen[0]
        if not records:
            raise NotFound(
                f"experiment {experiment_id} saved no ONNX model (task.save_model(model, name, "
                "example_input=...) saves one)"
            )
        if len(records) > 1:
            names = ", ".join(str(r.metadata.get("model", r.name)) for r in records)
            raise UsageError(
                f"experiment {experiment_id} saved several ONNX models ({names}); name one: "
                f"`phalanx models register {experiment_id}/MODEL --name NAME`"
            )
        return records[0]

    def _params(self, experiment_id: str) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for p in self.store.params(experiment_id):
            params.setdefault(f"{p.section}/{p.key}", p.value)
        return params

    def _final_metrics(self, experiment_id: str) -> dict[str, float]:
        """Each series' last value by step, as `title/series` (`loss/train`)."""
        found: dict[str, float] = {}
        for title, names in self.store.metric_titles(experiment_id).items():
            if title.startswith(("system/", ":")):  # the machine's (machine.sysmetrics), not the model's
                continue
            for series, points in self.store.last_points(experiment_id, title, 1).items():
                if series in names and points.values:
                    found[f"{title}/{series}"] = points.values[-1]
        return found

    def _snapshot(self, experiment_id: str) -> dict[str, Any]:
        """The source snapshot's sha256 and the git commit, when the experiment recorded them."""
        repro = self.store.repro(experiment_id)
        snap = repro.get("snapshot") if isinstance(repro.get("snapshot"), dict) else None
        found: dict[str, Any] = {}
        git = repro.get("git")
        if isinstance(git, dict) and git.get("commit"):
            found["git_commit"] = git.get("commit")
        if snap and snap.get("path"):
            try:
                found["sha256"] = hashlib.sha256(
                    self.artifacts.read_bytes(experiment_id, str(snap["path"]))
                ).hexdigest()
                found["files"] = snap.get("files")
            except NotFound:
                pass
        return found

    # --- read -------------------------------------------------------------------------------

    def resolve(self, ref: str | ModelRef) -> ModelVersion:
        """``NAME`` (latest), ``NAME@N`` or ``NAME@alias`` -> that version. Raises NotFound."""
        parsed = parse_ref(ref) if isinstance(ref, str) else ref
        if parsed.alias is not None:
            number = self.sql.alias_version(parsed.name, parsed.alias)
        elif parsed.version is not None:
            number = parsed.version
        else:
            number = self.sql.latest_version(parsed.name)
        return self.sql.get_version(parsed.name, number)

    def versions(self, name: str) -> list[ModelVersion]:
        return self.sql.versions(check_model_name(name))

    def models(self, projects: Sequence[str] | None = None) -> list[RegisteredModel]:
        """Every registered model; only those of ``projects`` when given (a team server's caller)."""
        return self.sql.list_models(projects)

    def project_of(self, name: str) -> str:
        """The project ``name`` belongs to (that of the experiment it was first registered from)."""
        return self.sql.model_project(check_model_name(name))

    def read_bytes(self, version: ModelVersion) -> bytes:
        """The version's ONNX file, checked against its recorded sha256 (a file changed in the
        artifact store is refused, not served)."""
        data = self.artifacts.read_bytes(REGISTRY_ID, version.path)
        digest = hashlib.sha256(data).hexdigest()
        if digest != version.sha256:
            raise ParityFailed(
                f"{version.name}@{version.version}: the registry's file changed since it was registered "
                f"(sha256 {digest[:12]}… != {version.sha256[:12]}…); register the model again"
            )
        return data

    # --- change -----------------------------------------------------------------------------

    def set_alias(self, name: str, alias: str, version: int) -> int | None:
        """Move (or create) ``name@alias`` to ``version``; returns the version it named before."""
        return self.sql.set_alias(check_model_name(name), check_alias(alias), int(version))

    def delete_alias(self, name: str, alias: str) -> None:
        self.sql.delete_alias(check_model_name(name), check_alias(alias))

    def remove(self, name: str, version: int | None = None) -> list[ModelVersion]:
        """Remove version ``version`` of ``name`` (the aliases naming it go too) or, ``version``
        None, the model with every version and alias; what was removed. The registry's copy of a
        file goes with the last version naming it (content-addressed: two versions of the same bytes
        share one); the experiment's own file stays."""

        # The rows go first (their own commit: a crash after it leaves an unreferenced file, never a
        # version without its file). Then "no version names this file" is decided and the file deleted
        # in one transaction under the name's lock (SqlRegistry._lock_name), the lock register's
        # add_version takes to check the file (keep_file) and insert its row; a copy is shared only
        # within a name (the name is in its path). So a registration of the same bytes either committed
        # first (the file is named: kept) or waits, then finds the file gone and puts it back. Deciding
        # and deleting outside that lock let a registration reuse the file in between and lose it.
        # The same on a folder and on S3 (its listings are not cached: exists asks the bucket).
        return self.sql.remove(
            check_model_name(name), None if version is None else int(version), drop_files=self._drop_files
        )

    def update(
        self,
        name: str,
        version: int | None = None,
        *,
        description: str | None = None,
        tags: Mapping[str, str | None] | None = None,
    ) -> None:
        self.sql.update(check_model_name(name), version, description=description, tags=tags)


def version_json(v: ModelVersion) -> dict[str, Any]:
    """One version as `-o json`, the REST API and the UI show it."""
    return {
        "name": v.name,
        "version": v.version,
        "ref": f"{v.name}@{v.version}",
        "aliases": list(v.aliases),
        "experiment_id": v.experiment_id,
        "source": v.source,
        "sha256": v.sha256,
        "size": v.size,
        "signature": v.signature,
        "lineage": v.lineage,
        "description": v.description,
        "tags": v.tags,
        "created_at": v.created_at,
    }


def model_json(m: RegisteredModel) -> dict[str, Any]:
    return {
        "name": m.name,
        "description": m.description,
        "tags": m.tags,
        "latest_version": m.latest_version,
        "aliases": m.aliases,
        "project": m.project,
        "created_at": m.created_at,
        "updated_at": m.updated_at,
    }
