"""Which data an experiment read, as its plan recorded it (``plan["inputs"]``, written when the
inputs were resolved): what `phalanx get` shows and what `phalanx diff` compares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from phalanx.spec.inputs import from_record, parse_dataset_ref


def inputs_of(plan: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The lineage records of a stored plan, without local paths' cache internals."""
    return [dict(r) for r in (plan or {}).get("inputs") or [] if isinstance(r, Mapping)]


def describe(record: Mapping[str, Any]) -> str:
    """``digits@3 (sha256 1a2b3c4d5e6f)`` or ``datastore store1:sub/dir``: what was read."""
    if record.get("kind") == "dataset":
        return f"{record.get('ref')} ({str(record.get('digest', ''))[:12]})"
    sub = f":{record['path']}" if record.get("path") else ""
    return f"datastore {record.get('datastore')}{sub}"


def inputs_text(plan: Mapping[str, Any] | None) -> list[str]:
    records = inputs_of(plan)
    if not records:
        return []
    out = ["", "inputs:"]
    for r in records:
        out.append(f"  {r.get('name')}: {describe(r)}, {r.get('mode')} -> ${r.get('env')}")
    return out


def inputs_diff(plan_a: Mapping[str, Any] | None, plan_b: Mapping[str, Any] | None) -> dict[str, Any]:
    """Per input name whose data differ: {"a": "digits@1 (...)", "b": "digits@2 (...)"}; a side
    without that input reads None."""
    a = {r.get("name"): describe(r) for r in inputs_of(plan_a)}
    b = {r.get("name"): describe(r) for r in inputs_of(plan_b)}
    return {
        str(k): {"a": a.get(k), "b": b.get(k)}
        for k in sorted(set(a) | set(b), key=str)
        if a.get(k) != b.get(k)
    }


def pin_inputs(spec: Any, plan: Mapping[str, Any] | None) -> Any:
    """``spec`` reading exactly the data an earlier run of it read (``phalanx resume``/``rerun``): a
    dataset at the version that run used, not whatever ``@latest`` means now."""
    records = {r.get("name"): r for r in inputs_of(plan)}
    if not records or not getattr(spec, "inputs", ()):
        return spec
    return replace(
        spec, inputs=tuple(from_record(records[i.name]) if i.name in records else i for i in spec.inputs)
    )


def latest_inputs(spec: Any) -> Any:
    """``spec`` reading the latest version of each dataset it names (``phalanx rerun --latest-data``),
    whatever version its file pinned: the data moved on, the code and params stay as they ran."""
    if not getattr(spec, "inputs", ()):
        return spec
    return replace(
        spec,
        inputs=tuple(
            replace(i, dataset=f"{parse_dataset_ref(i.dataset)[0]}@latest") if i.dataset is not None else i
            for i in spec.inputs
        ),
    )
