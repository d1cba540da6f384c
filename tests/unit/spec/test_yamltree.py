"""YAML features a user may rely on: anchors, aliases and merge keys; positions are 1-based."""

from __future__ import annotations

from dataclasses import replace

from phalanx.plan import build_plan
from phalanx.spec.loader import load_spec_text
from phalanx.spec.yamltree import Mark, YMap, compose

ANCHORED = """version: 1
kind: experiment
framework: tensorflow
environment:
  resources: &small
    cpu: {requests: 1, limits: 2}
    memory: {requests: 256, limits: 1024}
  replicas:
    n_workers: 2
    n_ps: 1
    default_worker:
      resources:
        <<: *small
        gpu: {requests: 1, limits: 1}
    default_ps:
      resources: *small
run: {cmd: python x.py}
"""

EXPLICIT = """version: 1
kind: experiment
framework: tensorflow
environment:
  resources:
    cpu: {requests: 1, limits: 2}
    memory: {requests: 256, limits: 1024}
  replicas:
    n_workers: 2
    n_ps: 1
    default_worker:
      resources:
        cpu: {requests: 1, limits: 2}
        memory: {requests: 256, limits: 1024}
        gpu: {requests: 1, limits: 1}
    default_ps:
      resources:
        cpu: {requests: 1, limits: 2}
        memory: {requests: 256, limits: 1024}
run: {cmd: python x.py}
"""


def test_anchors_aliases_and_merge_keys_load_like_the_written_out_file() -> None:
    a = load_spec_text(ANCHORED, "a.yml")
    b = load_spec_text(EXPLICIT, "b.yml")
    assert replace(a, source_text=None) == replace(b, source_text=None)
    assert build_plan(a).replica("worker-1").resources.gpu.limits == 1


def test_keys_written_next_to_a_merge_win() -> None:
    root, problems = compose("base: &b {x: 1, y: 2}\nmine:\n  <<: *b\n  y: 3\n", "f.yml")
    assert not problems and isinstance(root, YMap)
    mine = root.get("mine")
    assert isinstance(mine, YMap)
    assert [(k.name, v.value) for k, v in mine.items] == [("x", 1), ("y", 3)]  # type: ignore[union-attr]


def test_positions_are_one_based_lines_and_columns() -> None:
    root, _ = compose("a:\n  b: 1\n", "f.yml")
    assert isinstance(root, YMap)
    inner = root.get("a")
    assert isinstance(inner, YMap)
    assert inner.key("b") is not None and inner.key("b").mark == Mark(2, 3)  # type: ignore[union-attr]
    assert inner.get("b").mark == Mark(2, 6)  # type: ignore[union-attr]


def test_an_empty_document_is_none() -> None:
    assert compose("# nothing here\n", "f.yml") == (None, [])
