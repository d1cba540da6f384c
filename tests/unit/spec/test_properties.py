"""Property-based: generated valid files (either layout) expand to the topology they describe and
survive dump -> load unchanged; arbitrary junk only ever yields a SpecError."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from phalanx.domain import Range, Resources
from phalanx.errors import SpecError
from phalanx.plan import build_plan
from phalanx.spec.dump import spec_to_yaml
from phalanx.spec.loader import load_spec, load_spec_text
from phalanx.spec.model import ExperimentSpec
from phalanx.spec.quantities import parse_cpu, parse_gpu, parse_memory

FIXTURES = Path(__file__).parent / "fixtures"
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _range(
    values: st.SearchStrategy[int], show: Any, least_limit: int = 0
) -> st.SearchStrategy[dict[str, Any]]:
    """``least_limit``: a cpu or memory limit of 0 is refused (it would leave the replica nothing)."""

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        low = draw(values)
        high = max(low + draw(st.integers(0, 8)), least_limit)
        out: dict[str, Any] = {}
        if draw(st.booleans()):
            out["requests"] = show(draw, low)
        if draw(st.booleans()):
            out["limits"] = show(draw, high)
        return out

    return build()


def _cpu(draw: st.DrawFn, n: int) -> Any:
    return draw(st.sampled_from([n, f"{n * 1000}m", str(n)]))


def _memory(draw: st.DrawFn, n: int) -> Any:
    return draw(st.sampled_from([n * 256, f"{n * 256}Mi", f"{n * 0.25}Gi", f"{n * 256 * 1024}Ki"]))


def _gpu(draw: st.DrawFn, n: int) -> Any:
    return n


resources = st.fixed_dictionaries(
    {},
    optional={
        "cpu": _range(st.integers(0, 8), _cpu, least_limit=1),
        "memory": _range(st.integers(0, 8), _memory, least_limit=1),
        "gpu": _range(st.integers(0, 4), _gpu),
    },
)
labels = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9.\-/]{0,12}", fullmatch=True), st.text(max_size=8), max_size=2
)
template = st.fixed_dictionaries({}, optional={"resources": resources, "node_selector": labels})


@st.composite
def experiment_files(draw: st.DrawFn) -> dict[str, Any]:
    framework = draw(st.sampled_from(["pytorch", "tensorflow", "mxnet", "horovod"]))
    n_workers = draw(st.integers(0, 6))
    n_ps = draw(st.integers(0, 3)) if framework in ("tensorflow", "mxnet") else 0
    topology: dict[str, Any] = {"n_workers": n_workers}
    if n_ps:
        topology["n_ps"] = n_ps
    if draw(st.booleans()):
        topology["processes_per_replica"] = draw(st.integers(1, 4))
    for role, n in (("worker", n_workers), ("ps", n_ps)):
        if n and draw(st.booleans()):
            topology[f"default_{role}"] = draw(template)
        indexes = draw(st.lists(st.integers(0, max(n - 1, 0)), unique=True, max_size=n)) if n else []
        if indexes:
            topology[role] = [{"index": i, **draw(template)} for i in indexes]
    doc: dict[str, Any] = {"version": 1, "kind": "experiment"}
    environment: dict[str, Any] = {}
    if draw(st.booleans()):
        environment["resources"] = draw(resources)
    old_layout = draw(st.booleans())
    if old_layout:
        environment[framework] = topology
    else:
        doc["framework"] = framework
        environment["replicas"] = topology
    doc["environment"] = environment
    params = draw(
        st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True), st.integers(), max_size=3)
    )
    if params:
        doc["params"] = params
    cmd = "python train.py" + "".join(f" --{k}={{{{ {k} }}}}" for k in params)
    doc["run"] = {"cmd": cmd}
    return doc


def expected_resources(spec: dict[str, Any] | None) -> Resources:
    if spec is None:
        return Resources()
    parsers = {"cpu": parse_cpu, "memory": parse_memory, "gpu": parse_gpu}
    ranges = {}
    for name, r in spec.items():
        p = parsers[name]
        ranges[name] = Range(
            p(r["requests"]) if "requests" in r else None,
            p(r["limits"]) if "limits" in r else None,
        )
    return Resources(**ranges)


def comparable(spec: ExperimentSpec) -> ExperimentSpec:
    return replace(spec, source_file=None, source_text=None)


@SETTINGS
@given(experiment_files())
def test_generated_files_expand_to_the_topology_they_describe(doc: dict[str, Any]) -> None:
    spec = load_spec_text(yaml.safe_dump(doc, sort_keys=False), "gen.yml")
    plan = build_plan(spec)
    env = doc["environment"]
    topo = env.get("replicas") or next(v for k, v in env.items() if k not in ("resources", "replicas"))
    n_workers, n_ps = topo["n_workers"], topo.get("n_ps", 0)
    assert plan.topology() == {"master": 1, "worker": n_workers, "ps": n_ps}
    assert plan.replica("master").resources == expected_resources(env.get("resources"))
    for role, n in (("worker", n_workers), ("ps", n_ps)):
        default = topo.get(f"default_{role}", {})
        overrides = {o["index"]: o for o in topo.get(role, [])}
        for i in range(n):
            r = plan.replica(f"{role}-{i}")
            own = overrides.get(i, {})
            res = own["resources"] if "resources" in own else default.get("resources")
            selector = own["node_selector"] if "node_selector" in own else default.get("node_selector", {})
            assert r.resources == expected_resources(res), (role, i)
            assert dict(r.node_selector) == selector
            assert r.rank == (i + 1 if role == "worker" else None)
    for name, value in doc.get("params", {}).items():
        assert f"--{name}={value}" in plan.command


@SETTINGS
@given(experiment_files())
@example(
    {
        "version": 1,
        "kind": "experiment",
        "framework": "pytorch",
        "environment": {
            "replicas": {"n_workers": 1, "worker": [{"index": 0, "node_selector": {"a": "\x85"}}]}
        },
        "run": {"cmd": "python train.py"},
    }
)  # YAML reads NEL (and LS, PS) in a quoted scalar as a line break: found by hypothesis
def test_generated_specs_survive_dump_and_load(doc: dict[str, Any]) -> None:
    spec = load_spec_text(yaml.safe_dump(doc, sort_keys=False), "gen.yml")
    again = load_spec_text(spec_to_yaml(spec), "dumped.yml")
    assert comparable(again) == comparable(spec)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.yml")), ids=lambda p: p.name)
def test_every_loadable_fixture_survives_dump_and_load(path: Path) -> None:
    try:
        spec = load_spec(path)
    except SpecError:
        return  # the typo fixtures
    again = load_spec_text(spec_to_yaml(spec), "dumped.yml")
    assert comparable(again) == comparable(spec)
    assert "replicas:" in spec_to_yaml(spec) or spec.topology.n_workers == 0  # the canonical layout


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["experiment", "pytorch", "requests", "{{ x }}", "512Mi", "500m", "-1"]),
)
keys = st.one_of(
    st.text(max_size=10),
    st.sampled_from(
        [
            "version",
            "kind",
            "framework",
            "environment",
            "replicas",
            "resources",
            "cpu",
            "memory",
            "gpu",
            "requests",
            "limits",
            "n_workers",
            "n_ps",
            "worker",
            "ps",
            "index",
            "run",
            "cmd",
            "params",
            "build",
            "env_vars",
            "tensorflow",
            "pytorch",
            "default_worker",
            "worker_resources",
        ]
    ),
)
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=30,
)


def only_spec_errors(text: str) -> None:
    try:
        load_spec_text(text, "junk.yml")
    except SpecError as exc:
        assert exc.problems
        for p in exc.problems:
            assert p.file == "junk.yml" and p.line is not None and p.column is not None, p


@SETTINGS
@given(st.text(max_size=300))
def test_arbitrary_text_only_ever_yields_a_spec_error(text: str) -> None:
    only_spec_errors(text)


@SETTINGS
@given(junk)
def test_arbitrary_structures_only_ever_yield_a_spec_error(value: Any) -> None:
    only_spec_errors(yaml.safe_dump(value))


@SETTINGS
@given(st.dictionaries(keys, junk, max_size=6))
def test_junk_under_real_keys_only_ever_yields_a_spec_error(doc: dict[str, Any]) -> None:
    only_spec_errors(yaml.safe_dump({"version": 1, "kind": "experiment", **doc}))
