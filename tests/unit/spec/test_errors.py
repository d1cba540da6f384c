"""Every mistake the issue lists is refused with `FILE:LINE:COL: key.path: what is wrong`."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from phalanx.errors import SpecError
from phalanx.spec.loader import MAX_FILE_BYTES, load_spec, load_spec_text
from phalanx.spec.yamltree import MAX_NODES

HEAD = "version: 1\nkind: experiment\n"


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_spec_text(text, "f.yml")
    return [str(p) for p in err.value.problems]


def test_all_problems_are_reported_at_once_in_file_order() -> None:
    text = """version: 2
kind: experiment
framework: pytroch
backend: kubeflw
environment:
  resources:
    gpu:
      request: 1
      limits: 1
    cpu: {requests: 2, limits: 1}
    memory: {requests: 1Gi, limits: 512Mi}
  replicas:
    n_workers: -1
    n_ps: 1.5
run:
  cmd: python x.py --lr={{ lr }}
"""
    assert problems(text) == [
        "f.yml:1:10: version: unsupported version 2; Phalanx reads `version: 1`",
        "f.yml:3:12: framework: unknown framework 'pytroch'; did you mean 'pytorch'?"
        " (expected one of: pytorch, tensorflow, mxnet, horovod)",
        "f.yml:4:10: backend: unknown backend 'kubeflw'; did you mean 'kubeflow'?"
        " (expected one of: native, kubeflow, mpi)",
        "f.yml:8:7: environment.resources.gpu.request: unknown key; did you mean 'requests'?"
        " (allowed here: requests, limits)",
        "f.yml:10:32: environment.resources.cpu.limits: limits (1) are below requests (2);"
        " limits must be at least the requests",
        "f.yml:11:37: environment.resources.memory.limits: limits (512 MiB) are below requests (1024 MiB);"
        " limits must be at least the requests",
        "f.yml:13:16: environment.replicas.n_workers: must not be negative, got -1",
        "f.yml:14:11: environment.replicas.n_ps: expected a whole number of replicas, got the number 1.5",
        "f.yml:16:25: run.cmd: unknown placeholder {{ lr }}: not in params;"
        " declare it under params: or pass --param lr=VALUE",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            HEAD + "framwork: pytorch\nrun: {cmd: x}\n",
            "f.yml:3:1: framwork: unknown key; did you mean 'framework'?",
        ),
        (
            HEAD + "environment:\n  replicas:\n    default_worker:\n      resource: {}\nrun: {cmd: x}\n",
            "f.yml:6:7: environment.replicas.default_worker.resource: unknown key; did you mean 'resources'?",
        ),
        (
            HEAD + "run:\n  cmd: x\n  max_restart: 2\n",
            "f.yml:5:3: run.max_restart: unknown key; did you mean 'max_restarts'?",
        ),
    ],
)
def test_unknown_keys_at_any_depth_suggest_the_right_key(text: str, expected: str) -> None:
    (line,) = problems(text)
    assert line.startswith(expected)


def test_unknown_kind_and_version_are_refused() -> None:
    assert problems("version: 1\nkind: experimnt\nrun: {cmd: x}\n") == [
        "f.yml:2:7: kind: unknown kind 'experimnt'; did you mean 'experiment'?"
        " (Phalanx runs kind: experiment)"
    ]
    assert problems("version: '1'\nkind: experiment\nrun: {cmd: x}\n") == [
        "f.yml:1:10: version: unsupported version '1'; Phalanx reads `version: 1`"
    ]


def test_job_files_are_not_supported_yet() -> None:
    assert problems("version: 1\nkind: job\nhptuning: {}\n") == [
        "f.yml:2:7: kind: 'job' is not supported yet; Phalanx runs kind: experiment files"
    ]


def test_a_group_file_given_to_the_experiment_reader_names_the_group_command() -> None:
    assert problems("version: 1\nkind: group\nhptuning: {}\n") == [
        "f.yml:2:7: kind: a group is a hyperparameter search: run it with `phalanx group run -f FILE`"
        " (`phalanx check -f FILE` shows its search space)"
    ]


def test_worker_and_ps_indexes_out_of_range_say_the_valid_range() -> None:
    text = HEAD + (
        "framework: tensorflow\n"
        "environment:\n"
        "  replicas:\n"
        "    n_workers: 2\n"
        "    n_ps: 1\n"
        "    worker: [{index: 2}]\n"
        "    ps: [{index: 1}]\n"
        "run: {cmd: x}\n"
    )
    assert problems(text) == [
        "f.yml:8:22: environment.replicas.worker[0].index: worker index 2 is out of range:"
        " n_workers is 2, so indexes go from 0 to 1",
        "f.yml:9:18: environment.replicas.ps[0].index: ps index 1 is out of range:"
        " n_ps is 1, so indexes go from 0 to 0",
    ]


def test_an_index_under_a_wrong_count_is_not_a_second_problem() -> None:
    """n_workers: 1.5 is the mistake; its worker[0] is not also "out of range: n_workers is 0"."""
    text = HEAD + (
        "framework: pytorch\nenvironment:\n  replicas:\n    n_workers: 1.5\n"
        "    worker: [{index: 0}]\nrun: {cmd: x}\n"
    )
    assert problems(text) == [
        "f.yml:6:16: environment.replicas.n_workers: expected a whole number of replicas, got the number 1.5"
    ]
    too_many = text.replace("n_workers: 1.5", "n_workers: 100000000")
    assert [p.split(": ")[1] for p in problems(too_many)] == ["environment.replicas.n_workers"]


def test_an_index_without_workers_says_there_is_none() -> None:
    text = HEAD + "framework: pytorch\nenvironment:\n  replicas:\n    worker: [{index: 0}]\nrun: {cmd: x}\n"
    assert problems(text) == [
        "f.yml:6:22: environment.replicas.worker[0].index: worker index 0 is out of range:"
        " n_workers is 0, so there is no worker to override"
    ]


def test_duplicate_index_points_at_the_first() -> None:
    text = HEAD + (
        "framework: pytorch\nenvironment:\n  replicas:\n    n_workers: 2\n"
        "    worker:\n      - index: 1\n      - index: 1\nrun: {cmd: x}\n"
    )
    assert problems(text) == [
        "f.yml:9:16: environment.replicas.worker[1].index: duplicate worker index 1 (first given at line 8)"
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "must not be negative, got -1"),
        ("1.5", "expected a whole number of replicas, got the number 1.5"),
        ("two", "expected a whole number of replicas, got the text 'two'"),
        ("true", "expected a whole number of replicas, got the boolean true"),
    ],
)
def test_counts_must_be_non_negative_whole_numbers(value: str, message: str) -> None:
    text = HEAD + f"framework: pytorch\nenvironment:\n  replicas:\n    n_workers: {value}\nrun: {{cmd: x}}\n"
    assert problems(text) == [f"f.yml:6:16: environment.replicas.n_workers: {message}"]


def test_processes_per_replica_is_at_least_one() -> None:
    text = (
        HEAD + "framework: pytorch\nenvironment:\n  replicas:\n    processes_per_replica: 0\nrun: {cmd: x}\n"
    )
    assert problems(text) == [
        "f.yml:6:28: environment.replicas.processes_per_replica: must be at least 1, got 0"
    ]


@pytest.mark.parametrize("framework", ["pytorch", "horovod"])
def test_parameter_servers_are_refused_for_pytorch_and_horovod(framework: str) -> None:
    text = HEAD + f"framework: {framework}\nenvironment:\n  replicas:\n    n_workers: 1\n    n_ps: 2\n"
    text += "run: {cmd: x}\n"
    assert problems(text) == [
        f"f.yml:7:5: environment.replicas.n_ps: {framework} has no parameter servers"
        " (only tensorflow and mxnet do); remove it"
    ]


def test_parameter_servers_in_the_older_pytorch_section_are_refused() -> None:
    text = (
        HEAD + "environment:\n  pytorch:\n    n_workers: 1\n    default_ps: {resources: {}}\nrun: {cmd: x}\n"
    )
    assert problems(text) == [
        "f.yml:6:5: environment.pytorch.default_ps: pytorch has no parameter servers"
        " (only tensorflow and mxnet do); remove it"
    ]


def test_limits_below_requests_are_refused_in_every_unit() -> None:
    text = HEAD + (
        "environment:\n  resources:\n"
        "    cpu: {requests: 1500m, limits: 1}\n"
        "    memory: {requests: 2Gi, limits: 1G}\n"
        "    gpu: {requests: 2, limits: 1}\n"
        "run: {cmd: x}\n"
    )
    assert problems(text) == [
        "f.yml:5:36: environment.resources.cpu.limits: limits (1) are below requests (1.5);"
        " limits must be at least the requests",
        "f.yml:6:37: environment.resources.memory.limits: limits (953.674 MiB) are below requests (2048 MiB);"
        " limits must be at least the requests",
        "f.yml:7:32: environment.resources.gpu.limits: limits (1) are below requests (2);"
        " limits must be at least the requests",
    ]


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        (
            "",
            "f.yml:1:1: run.cmd: missing; every experiment needs a command,"
            " e.g. `run: {cmd: python train.py}`",
        ),
        ("run:\n  max_restarts: 1\n", "f.yml:3:1: run.cmd: missing; give the shell command to run"),
        ("run:\n  cmd: ''\n", "f.yml:4:8: run.cmd: is empty; give the shell command to run"),
        ("run:\n  cmd: []\n", "f.yml:4:8: run.cmd: is an empty list; give at least one command"),
    ],
)
def test_a_missing_or_empty_command_is_refused(tail: str, expected: str) -> None:
    (line,) = problems(HEAD + tail)
    assert line.startswith(expected)


def test_unknown_placeholder_names_the_params_and_suggests() -> None:
    text = HEAD + "params:\n  lr: 0.1\nrun:\n  cmd: python x.py --lr={{ lrate }} --lr2={{lr}}\n"
    assert problems(text.replace("lrate", "lrr"))[0].startswith(
        "f.yml:6:25: run.cmd: unknown placeholder {{ lrr }}: not in params; did you mean 'lr'? (params: lr)"
    )
    assert problems(text) == [
        "f.yml:6:25: run.cmd: unknown placeholder {{ lrate }}: not in params (params: lr);"
        " declare it under params: or pass --param lrate=VALUE"
    ]


def test_placeholder_on_a_continued_line_is_located_on_that_line() -> None:
    text = HEAD + "declarations: {a: 1}\nrun:\n  cmd: python x.py --a={{ a }} \\\n    --b={{ b }}\n"
    assert problems(text) == [
        "f.yml:6:9: run.cmd: unknown placeholder {{ b }}: not in params (params: a);"
        " declare it under params: or pass --param b=VALUE"
    ]


def test_placeholder_expressions_are_refused() -> None:
    text = HEAD + "params: {k: [1, 2]}\nrun:\n  cmd: python x.py {{ k|length }}\n"
    assert problems(text) == [
        "f.yml:5:20: run.cmd: unsupported placeholder '{{ k|length }}':"
        " only {{ name }} with a name from params is filled"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "f.yml:1:1: the file is empty; an experiment file needs at least version, kind and run.cmd"),
        ("# only a comment\n", "f.yml:1:1: the file is empty"),
        (
            "- version: 1\n",
            "f.yml:1:1: expected a mapping of keys (version, kind, run, ...) at the top, got a list",
        ),
        (
            "just text",
            "f.yml:1:1: expected a mapping of keys (version, kind, run, ...) at the top, got the text",
        ),
        (
            "version: 1\nkind: [experiment\n",
            "f.yml:3:1: YAML syntax error: while parsing a flow sequence (started at line 2, column 7):"
            " expected ',' or ']', but got '<stream end>'",
        ),
        (
            "version: 1\n\tkind: experiment\n",
            "f.yml:2:1: YAML syntax error: while scanning for the next token: found character '\\t'",
        ),
        (
            "version: 1\n---\nkind: x\n",
            "f.yml:2:1: YAML syntax error: expected a single document in the stream",
        ),
        (
            "version: 1\nkind: \x07\n",
            "f.yml:2:7: not readable as YAML: character '\\x07' is not allowed in YAML",
        ),
        (HEAD + "run: {cmd: x}\nrun: {cmd: y}\n", "f.yml:4:1: run: duplicate key (first given at line 3)"),
        (
            HEAD + "name: !!python/object:os.system x\nrun: {cmd: x}\n",
            "f.yml:3:7: name: unsupported YAML tag",
        ),
        (
            HEAD + "params: {a: !!int abc}\nrun: {cmd: x}\n",
            "f.yml:3:13: params.a: 'abc' is not a valid !!int",
        ),
    ],
)
def test_files_that_are_not_experiment_mappings_are_refused_with_a_position(text: str, expected: str) -> None:
    (line,) = problems(text)
    assert line.startswith(expected)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"nope\.yml: no such file"):
        load_spec(tmp_path / "nope.yml")
    with pytest.raises(SpecError, match="is a directory"):
        load_spec(tmp_path)


def test_a_file_over_one_mib_is_refused_without_parsing(tmp_path: Path) -> None:
    big = tmp_path / "big.yml"
    big.write_text(HEAD + "run: {cmd: x}\n" + "#" * MAX_FILE_BYTES)
    with pytest.raises(SpecError, match="larger than 1 MiB"):
        load_spec(big)


def test_a_file_that_is_not_utf8_is_refused_with_its_position(tmp_path: Path) -> None:
    f = tmp_path / "latin1.yml"
    f.write_bytes(HEAD.encode() + b"name: caf\xe9\n")
    with pytest.raises(SpecError) as err:
        load_spec(f)
    assert (err.value.problems[0].line, err.value.problems[0].column) == (3, 10)


BILLION_LAUGHS = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{chr(ord('a') + i + 1)}: &{chr(ord('a') + i + 1)} [{','.join(['*' + chr(ord('a') + i)] * 9)}]"
            for i in range(8)
        ),
        "version: 1",
        "kind: experiment",
        "params: {x: *i}",
        "run: {cmd: x}",
    ]
)


def test_a_billion_laughs_document_is_refused_in_bounded_time_and_memory() -> None:
    """Expanded, the document holds a billion values: an unguarded loader runs for minutes and
    gigabytes. The bounds are generous on purpose (a shared machine); the guard takes milliseconds."""
    tracemalloc.start()
    started = time.process_time()  # CPU time: a loaded machine does not inflate it
    try:
        (line,) = problems(BILLION_LAUGHS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.process_time() - started < 10.0
    assert peak < 32 * 2**20
    assert f"expands to more than {MAX_NODES} values" in line and "billion laughs" in line


def test_a_file_of_very_many_values_is_refused_quickly() -> None:
    text = HEAD + "params: {x: [" + "0," * 400_000 + "0]}\nrun: {cmd: x}\n"
    started = time.process_time()  # CPU time: a loaded machine does not inflate it
    (line,) = problems(text)
    assert time.process_time() - started < 5.0  # about 0.2 s of CPU
    assert f"more than {MAX_NODES} values in one file" in line


def test_recursive_aliases_and_deep_nesting_are_refused() -> None:
    (line,) = problems(HEAD + "params: &p {x: *p}\nrun: {cmd: x}\n")
    assert line == "f.yml:3:9: params.x: a YAML alias refers to a value that contains it (recursive alias)"
    deep = HEAD + "params: {x: " + "[" * 300 + "]" * 300 + "}\nrun: {cmd: x}\n"
    (line,) = problems(deep)
    assert "nested more than 64 levels deep" in line


def test_unsupported_polyaxon_sections_say_why() -> None:
    found = problems(HEAD + "hptuning: {concurrency: 2}\nmodel: {}\nrun: {cmd: x}\n")
    assert found == [
        "f.yml:3:1: hptuning: belongs to kind: group (hyperparameter search): write `kind: group` and run it"
        " with `phalanx group run -f FILE`, or remove it",
        "f.yml:4:1: model: a polyaxon-lib section (Polyaxon itself dropped it in 0.5), not supported:"
        " put the training code in a script and start it with run.cmd",
    ]


def test_values_of_the_wrong_shape_are_refused() -> None:
    text = HEAD + (
        "tags: {a: 1}\n"
        "build: {env_vars: [[A, 1], [B]], image: 3}\n"
        "env: {1A: x, B: [1]}\n"
        "environment:\n"
        "  resources: {memory: {requests: 512m, limits: 2GiB}, gpu: {requests: 0.5}, cpu: {requests: true}}\n"
        "  tolerations: [{key: k, opertor: Exists}]\n"
        "run: {cmd: [x, 3]}\n"
    )
    assert problems(text) == [
        "f.yml:3:7: tags: expected a list, got a mapping",
        "f.yml:4:28: build.env_vars[1]: expected a [NAME, value] pair, got a list",
        "f.yml:4:41: build.image: expected text, got the number 3",
        "f.yml:5:7: env.1A: not a valid environment variable name",
        "f.yml:5:17: env.B: expected a text value, got a list",
        "f.yml:7:34: environment.resources.memory.requests: '512m': 'm' means milli-bytes;"
        " did you mean 'Mi'?",
        "f.yml:7:48: environment.resources.memory.limits: '2GiB': unknown unit 'GiB'; did you mean 'Gi'?"
        " (units: Ki, Mi, Gi, Ti, k, M, G, T)",
        "f.yml:7:71: environment.resources.gpu.requests: expected a whole number of GPUs, got 0.5",
        "f.yml:7:93: environment.resources.cpu.requests: expected a number of cores or milli-cores"
        " like '500m', got the boolean true",
        "f.yml:8:26: environment.tolerations[0].opertor: unknown key; did you mean 'operator'?"
        " (allowed here: key, operator, value, effect, tolerationSeconds)",
        "f.yml:9:16: run.cmd[1]: expected text, got the number 3",
    ]


def test_topology_given_twice_or_conflicting_framework_is_refused() -> None:
    text = HEAD + "framework: pytorch\nenvironment:\n  tensorflow: {n_workers: 1}\n"
    text += "  replicas: {n_workers: 1}\nrun: {cmd: x}\n"
    assert problems(text) == [
        "f.yml:5:3: environment.tensorflow: conflicts with `framework: pytorch` (line 3);"
        " keep one, e.g. `framework:` with environment.replicas",
        "f.yml:6:3: environment.replicas: the topology is already given by tensorflow (line 5); keep one",
    ]


def test_replicas_without_a_framework_are_refused() -> None:
    assert problems(HEAD + "environment:\n  replicas: {n_workers: 1}\nrun: {cmd: x}\n") == [
        "f.yml:4:3: environment.replicas: replicas need a framework:"
        " add `framework: pytorch` (or tensorflow, mxnet, horovod) at the top"
    ]


def test_params_and_declarations_together_are_refused() -> None:
    (line,) = problems(HEAD + "params: {a: 1}\ndeclarations: {b: 2}\nrun: {cmd: x}\n")
    assert line == "f.yml:4:1: declarations: give params or declarations, not both (params is at line 3)"


def test_worker_and_worker_resources_combine_but_may_not_both_give_resources() -> None:
    base = HEAD + "framework: pytorch\nenvironment:\n  replicas:\n    n_workers: 3\n"
    both = "    worker_resources: [{index: 2, cpu: {requests: 1}}]\n    worker: [{index: 2, resources: {}}]\n"
    assert problems(base + both + "run: {cmd: x}\n") == [
        "f.yml:8:22: environment.replicas.worker[0].index: the resources of worker 2 are given twice"
        " (first given at line 7)"
    ]
    combined = "    worker_resources: [{index: 2, cpu: {requests: 1}}]\n"
    combined += "    worker: [{index: 2, node_selector: {a: b}}]\n"
    spec = load_spec_text(base + combined + "run: {cmd: x}\n", "f.yml")
    assert spec.topology.worker[2].node_selector == {"a": "b"}
    assert (
        spec.topology.worker[2].resources is not None and spec.topology.worker[2].resources.cpu.requests == 1
    )


def test_a_framework_section_with_nothing_under_it_still_names_the_framework() -> None:
    spec = load_spec_text(HEAD + "environment:\n  mxnet:\nrun: {cmd: x}\n", "f.yml")
    assert spec.framework is not None and spec.framework.value == "mxnet"


def test_a_polyaxon_v1_file_gets_one_sentence_naming_the_format_phalanx_reads() -> None:
    v1 = """version: 1.1
kind: component
name: train
inputs:
- {name: lr, type: float, value: 0.1}
run:
  kind: job
  container:
    image: python:3.11
    command: [python, train.py]
"""
    (only,) = problems(v1)
    assert only.startswith("f.yml:2:7: kind: 'component' is a Polyaxon v1.x file")
    assert "Polyaxon 0.x format" in only and "`version: 1`" in only and "docs/experiment-file.md" in only
    (op,) = problems(v1.replace("kind: component", "kind: operation"))
    assert "'operation' is a Polyaxon v1.x file" in op


def test_a_name_project_or_tag_that_would_break_tables_is_refused_where_it_is() -> None:
    found = problems(
        HEAD
        + 'name: "first\\nsecond"\nproject: '
        + "p" * 200
        + '\ntags: [ok, "a\\tb"]\nrun:\n  cmd: "true"\n'
    )
    assert found == [
        "f.yml:3:7: name: the name 'first\\nsecond' holds a control character ('\\n'): it is shown on one"
        " line in tables and logs; remove it",
        "f.yml:4:10: project: the project is 200 characters long; at most 128"
        " (it is shown in tables and logs)",
        "f.yml:5:12: tags[1]: the tag 'a\\tb' holds a control character ('\\t'): it is shown on one line in"
        " tables and logs; remove it",
    ]
