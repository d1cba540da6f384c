"""Read models: what the CLI and the server both show of an experiment, computed from the store.

They live here, below both (the server imports no module of ``phalanx.cli``): a change to what
`phalanx get -o json` says changes the API's answer the same way.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.domain import BUILD_CONSOLE, DECLARED_SECTIONS, ExperimentStatus, console_sources
from phalanx.errors import NotFound
from phalanx.store.filters import NUMBER
from phalanx.suggest import did_you_mean

if TYPE_CHECKING:
    from phalanx.domain import Experiment, LogLine, Replica
    from phalanx.store.base import ParamRecord, Store

# an experiment whose environment may still be built: its build console may not have a line yet
BUILD_MAY_COME = (ExperimentStatus.CREATED, ExperimentStatus.BUILDING)


class Consoles(Protocol):
    """What reading an experiment's console asks of a door (this machine's store or a server's)."""

    def list_replicas(self, experiment_id: str) -> list[Replica]: ...

    def logs(
        self, experiment_id: str, replica: str | None = None, offset: int = 0, limit: int = 1000
    ) -> list[LogLine]: ...


def check_console(store: Consoles, experiment: Experiment, replica: str | None) -> None:
    """NotFound (exit 2, 404) for a console ``replica`` the experiment does not have, naming the ones
    it has (and the nearest): a typo read as an empty console before, and so was ``build`` of an
    experiment that had no environment build. A name with lines of its own is always read."""
    if not replica:
        return
    names = [r.name for r in store.list_replicas(experiment.id)]
    if replica in names:
        return
    had_build = experiment.status in BUILD_MAY_COME or bool(
        store.logs(experiment.id, replica=BUILD_CONSOLE, limit=1)
    )
    if replica == BUILD_CONSOLE:
        if had_build:
            return
        raise NotFound(
            f"experiment {experiment.id} had no environment built for it, so it has no build console:"
            f" --replica takes one of its replicas ({', '.join(names) or 'none yet'})"
        )
    if store.logs(experiment.id, replica=replica, limit=1):
        return
    known = console_sources(names) if had_build else names
    hint = did_you_mean(replica, known)
    raise NotFound(
        f"experiment {experiment.id} has no replica {replica!r} (it has: {', '.join(known)}){hint}"
    )


def params_by_section(records: list[ParamRecord]) -> dict[str, dict[str, Any]]:
    """{section: {key: value}}; a key whose writers report different values (each rank its own
    seed) reads {"per_replica": [{"replica", "rank", "value"}, ...]} instead (docs/tracking.md)."""
    grouped: dict[str, dict[str, list[ParamRecord]]] = {}
    for p in records:
        grouped.setdefault(p.section, {}).setdefault(p.key, []).append(p)
    return {
        section: {
            key: reports[0].value
            if len(reports) == 1
            else {PER_REPLICA: [{"replica": r.replica, "rank": r.rank, "value": r.value} for r in reports]}
            for key, reports in keys.items()
        }
        for section, keys in grouped.items()
    }


PER_REPLICA = "per_replica"


def param_conflicts(records: list[ParamRecord]) -> list[dict[str, Any]]:
    """The keys whose declared value (section Declared or Trial: the file's params after `--param`,
    an estimator's script_params, a trial's sampled values) differs from what the script reported
    for the same key in another section (argparse's Args, task.connect's General, ...), each
    ``{"key", "declared": {"section", "value"}, "reported": [{"section", "value", "replica",
    "rank"}]}``: shown by `phalanx params`, `get`, the API and the UI, never resolved silently."""
    declared = {p.key: p for p in records if p.section in DECLARED_SECTIONS}
    out: list[dict[str, Any]] = []
    for key, d in declared.items():
        differing = [
            {"section": p.section, "value": p.value, "replica": p.replica, "rank": p.rank}
            for p in records
            if p.key == key and p.section not in DECLARED_SECTIONS and not same_value(p.value, d.value)
        ]
        if differing:
            out.append(
                {"key": key, "declared": {"section": d.section, "value": d.value}, "reported": differing}
            )
    return out


def same_value(a: Any, b: Any) -> bool:
    """Whether a reported and a declared value say the same (``0.5`` and ``"0.5"``, ``True`` and
    ``"true"``): numbers by value, anything else by its text."""
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None:
        return na == nb
    return _text(a) == _text(b)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str) and NUMBER.fullmatch(v.strip()):
        return float(v)
    return None


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)


def conflict_notes(records: list[ParamRecord]) -> dict[tuple[str, str], str]:
    """(section, key) -> what the other side says, for every record in a conflict (a table's note)."""
    notes: dict[tuple[str, str], str] = {}
    for c in param_conflicts(records):
        d = c["declared"]
        shown = ", ".join(f"{r['section']} {r['value']!r}" for r in c["reported"])
        notes[(d["section"], c["key"])] = f"the script reported {shown}"
        for r in c["reported"]:
            notes[(r["section"], c["key"])] = f"declared {d['value']!r} ({d['section']})"
    return notes


def _changed(a: Mapping[str, Any], b: Mapping[str, Any], keys: Iterable[str] | None = None) -> dict[str, Any]:
    """``{key: {"a": ..., "b": ...}}`` for the keys whose values differ (all keys of both by default)."""
    names = sorted(set(a) | set(b)) if keys is None else keys
    return {k: {"a": a.get(k), "b": b.get(k)} for k in names if a.get(k) != b.get(k)}


def _file_diff(a: Experiment, b: Experiment, name_a: str, name_b: str) -> list[str]:
    """The experiment files' unified diff; empty when either side is a plain script's run."""
    if not (a.spec_text and b.spec_text):
        return []
    return list(
        difflib.unified_diff(
            a.spec_text.splitlines(),
            b.spec_text.splitlines(),
            f"{name_a}/file",
            f"{name_b}/file",
            lineterm="",
        )
    )


def _snapshot_files(store: Store, exp: Experiment, record: dict[str, Any]) -> dict[str, bytes]:
    from phalanx import repro  # why: `phalanx --help` imports this module

    path = (record.get("snapshot") or {}).get("path")
    if not path or store.artifact_store is None or not store.artifact_store.exists(exp.id, path):
        return {}
    return repro.source_files(store.artifact_store.read_bytes(exp.id, path))


def _code_diff(fa: dict[str, bytes], fb: dict[str, bytes]) -> list[str]:
    code: list[str] = []
    for name in sorted(set(fa) | set(fb)):
        if fa.get(name) == fb.get(name):
            continue
        old = fa.get(name, b"").decode(errors="replace").splitlines()
        new = fb.get(name, b"").decode(errors="replace").splitlines()
        code.extend(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}", lineterm=""))
    return code


def _unrecorded(
    a: Experiment, b: Experiment, records: tuple[dict[str, Any], ...], snapshots: tuple[dict[str, bytes], ...]
) -> dict[str, list[str]]:
    """What each side never recorded, and so is not compared: a missing record or snapshot is not
    "every package removed" or "every file deleted" (a plain script's run, one recorded before repro)."""
    unrecorded: dict[str, list[str]] = {"a": [], "b": []}
    both_plain = a.backend == b.backend == "script"  # neither ever has a file: nothing to say
    for side, exp, record, snapshot in zip(("a", "b"), (a, b), records, snapshots, strict=True):
        if not (record.get("python") or record.get("packages")):
            unrecorded[side].append("environment")
        if not snapshot:
            unrecorded[side].append("source snapshot")
        if not exp.spec_text and not both_plain:
            unrecorded[side].append("experiment file")
    return unrecorded


def _pinned(record: dict[str, Any]) -> dict[str, str]:
    return dict(p.split("==", 1) for p in record.get("packages") or [] if "==" in p)


def diff_doc(
    store: Store,
    a: Experiment,
    b: Experiment,
    records: tuple[dict[str, Any], dict[str, Any]] | None = None,
    labels: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """What differs between two experiments (`phalanx diff -o json`, the API): params, the
    experiment file, the code (their source snapshots), packages, git, versions and the data they
    read; what one side never recorded is listed under ``unrecorded``, not compared. ``records``:
    the two sides' repro records when not the experiments' own (two attempts); ``labels``: how the
    sides are named then (``ID@N``)."""
    from phalanx.data.lineage import inputs_diff  # why: `phalanx --help` imports this module

    ra, rb = records if records is not None else (store.repro(a.id), store.repro(b.id))
    name_a, name_b = labels or (a.id, b.id)
    pa = dict((a.plan or {}).get("params") or {})
    pb = dict((b.plan or {}).get("params") or {})
    fa, fb = _snapshot_files(store, a, ra), _snapshot_files(store, b, rb)
    unrecorded = _unrecorded(a, b, (ra, rb), (fa, fb))
    missing = unrecorded["a"] + unrecorded["b"]
    if "environment" in missing:
        ra, rb = {}, {}
    if "source snapshot" in missing:
        fa, fb = {}, {}
    if records is not None:  # two attempts: their params are what each was launched with
        pa = dict((ra.get("launch") or {}).get("params") or pa)
        pb = dict((rb.get("launch") or {}).get("params") or pb)
    return {
        "a": name_a,
        "b": name_b,
        "params": _changed(pa, pb),
        "file": _file_diff(a, b, name_a, name_b),
        "code": _code_diff(fa, fb),
        "packages": _changed(_pinned(ra), _pinned(rb)),
        "git": _changed(ra.get("git") or {}, rb.get("git") or {}, ("commit", "branch", "dirty")),
        "versions": _changed(ra, rb, ("python", "phalanx", "host")),
        "unrecorded": {side: what for side, what in unrecorded.items() if what},
        "data": inputs_diff(a.plan, b.plan),
    }
