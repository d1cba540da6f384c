"""Read models: what the CLI and the server both show of an experiment, computed from the store.

They live here, below both (the server imports no module of ``phalanx.cli``): a change to what
`phalanx get -o json` says changes the API's answer the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phalanx.domain import Experiment
    from phalanx.store.base import ParamRecord, Store


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


def run_details(store: Store, experiment_id: str) -> dict[str, Any]:
    """Attempts, what ran (git, versions, host) and the pace of each rank: `get -o json` and the API."""
    from phalanx.stragglers import pace

    repro = store.repro(experiment_id)
    git = dict(repro.get("git") or {})
    git.pop("diff", None)  # `phalanx diff` shows code; get stays short
    source = {
        "git": git or None,
        "python": repro.get("python"),
        "phalanx": repro.get("phalanx"),
        "host": repro.get("host"),
        "packages": len(repro.get("packages") or []),
        "snapshot": repro.get("snapshot"),
        "launch": repro.get("launch"),
    }
    return {
        "attempts": store.attempts(experiment_id),
        "pod_attempts": store.replica_starts(experiment_id),
        "source": source if repro else None,
        "pace": pace(store, experiment_id),
    }


def diff_doc(store: Store, a: Experiment, b: Experiment) -> dict[str, Any]:
    """What differs between two experiments (`phalanx diff -o json`, the API): params, the
    experiment file, the code (their source snapshots), packages, git and versions; what one side
    never recorded is listed under ``unrecorded``, not compared."""
    import difflib

    from phalanx import repro

    ra, rb = store.repro(a.id), store.repro(b.id)
    pa = dict((a.plan or {}).get("params") or {})
    pb = dict((b.plan or {}).get("params") or {})
    params = {
        k: {"a": pa.get(k), "b": pb.get(k)} for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)
    }
    no_file = not (a.spec_text and b.spec_text)  # a plain script's run has no experiment file
    file_diff = (
        []
        if no_file
        else list(
            difflib.unified_diff(
                (a.spec_text or "").splitlines(),
                (b.spec_text or "").splitlines(),
                f"{a.id}/file",
                f"{b.id}/file",
                lineterm="",
            )
        )
    )

    def files(exp: Any, record: dict[str, Any]) -> dict[str, bytes]:
        path = (record.get("snapshot") or {}).get("path")
        if not path or store.artifact_store is None or not store.artifact_store.exists(exp.id, path):
            return {}
        return repro.source_files(store.artifact_store.read_bytes(exp.id, path))

    fa, fb = files(a, ra), files(b, rb)
    # What one side never recorded is not compared: a missing record or snapshot is not "every
    # package removed" or "every file deleted" (a plain script's run, one recorded before repro).
    unrecorded: dict[str, list[str]] = {"a": [], "b": []}
    for side, record, snapshot in (("a", ra, fa), ("b", rb, fb)):
        if not (record.get("python") or record.get("packages")):
            unrecorded[side].append("environment")
        if not snapshot:
            unrecorded[side].append("source snapshot")
        both_plain = a.backend == b.backend == "script"  # neither ever has a file: nothing to say
        if not (a if side == "a" else b).spec_text and not both_plain:
            unrecorded[side].append("experiment file")
    if unrecorded["a"] or unrecorded["b"]:
        if "environment" in unrecorded["a"] + unrecorded["b"]:
            ra, rb = {}, {}
        if "source snapshot" in unrecorded["a"] + unrecorded["b"]:
            fa, fb = {}, {}
    code: list[str] = []
    for name in sorted(set(fa) | set(fb)):
        if fa.get(name) == fb.get(name):
            continue
        old = fa.get(name, b"").decode(errors="replace").splitlines()
        new = fb.get(name, b"").decode(errors="replace").splitlines()
        code.extend(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}", lineterm=""))
    ka = dict(p.split("==", 1) for p in ra.get("packages") or [] if "==" in p)
    kb = dict(p.split("==", 1) for p in rb.get("packages") or [] if "==" in p)
    packages = {
        k: {"a": ka.get(k), "b": kb.get(k)} for k in sorted(set(ka) | set(kb)) if ka.get(k) != kb.get(k)
    }
    ga, gb = ra.get("git") or {}, rb.get("git") or {}
    return {
        "a": a.id,
        "b": b.id,
        "params": params,
        "file": file_diff,
        "code": code,
        "packages": packages,
        "git": {
            k: {"a": ga.get(k), "b": gb.get(k)}
            for k in ("commit", "branch", "dirty")
            if ga.get(k) != gb.get(k)
        },
        "versions": {
            k: {"a": ra.get(k), "b": rb.get(k)}
            for k in ("python", "phalanx", "host")
            if ra.get(k) != rb.get(k)
        },
        "unrecorded": {side: what for side, what in unrecorded.items() if what},
    }
