"""What a Kubernetes pod runs, run here as real processes against a real `phalanx server`: the code
fetch with the token, the attempt numbering of a restarted pod, the per-pod environment build and
the slot launcher (the renders themselves are checked in tests/unit/backends)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from tests.unit.backends.conftest import EXPERIMENT_ID, context, plan
from tests.unit.backends.test_kube_attempts import TRAIN, _env, _run
from tests.unit.backends.test_kube_code import SLOTS, _slots

from phalanx.backends import kube_code
from phalanx.backends.kubeflow import KubeflowBackend
from phalanx.backends.kubernetes import KubernetesBackend
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.spec.model import Build
from phalanx.store import open_store
from phalanx.store.sql import points


def test_a_restarted_or_replaced_pod_replaces_the_steps_it_reports_again(tmp_path: Path) -> None:
    from tests.integration.server.serverproc import start_server, stop_server

    home = tmp_path / "server"
    home.mkdir()
    server = start_server(home, token="s3cret")
    store = open_store(Settings(home=home))
    try:
        store.create_experiment(name="k8s", project="p", experiment_id=EXPERIMENT_ID)
        src = tmp_path / "exp"
        src.mkdir()
        (src / "train.py").write_text(TRAIN)
        engine = KubeflowBackend(
            Settings(home=tmp_path / "client", token="s3cret"),
            Cluster(name="k", kind="kubernetes", server_url=server.url),
        )
        ctx = replace(context(), workdir=str(src))
        dry = engine.dry_run(replace(plan(workers=1, command="python -u train.py"), max_restarts=3), ctx)
        job, secret = dict(dry.objects[0]), dict(dry.objects[1])
        token = secret["stringData"]["token"]
        engine.upload_code(ctx)
        specs = job["spec"]["pytorchReplicaSpecs"]
        assert specs["Master"]["restartPolicy"] == "OnFailure"  # the kubelet restarts it in place

        behaviour = tmp_path / "behaviour.json"
        bin_dir = str(Path(sys.executable).parent)  # `python` as the image has it
        extra = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "HOME": str(tmp_path),
            "BEHAVIOUR": str(behaviour),
        }

        def pod(role: str, index: str, code: Path) -> tuple[list[str], list[str], dict[str, str]]:
            spec = specs[role]["template"]["spec"]
            main = spec["containers"][0]
            return spec["initContainers"][0]["command"], main["command"], _env(main, token, index, extra)

        def start(role: str, code: Path, first: int, last: int, base: float, exit: int) -> str:
            behaviour.write_text(json.dumps({"first": first, "last": last, "base": base, "exit": exit}))
            fetch, command, env = pod(role, "0", code)
            if not code.exists():  # a new pod: its init container fetches the code first
                assert _run(fetch, env, code).returncode == 0
            done = _run(command, env, code)
            assert done.returncode == exit, done.stderr[-3000:]
            return done.stderr

        pod_a, pod_b, worker = tmp_path / "pod-a", tmp_path / "pod-b", tmp_path / "pod-w"
        consoles = [
            start("Master", pod_a, 0, 11, 0.0, exit=1),
            start("Worker", worker, 0, 19, 1000.0, exit=0),
            start("Master", pod_a, 0, 14, 100.0, exit=1),  # restarted in place
            start("Master", pod_b, 10, 19, 200.0, exit=0),  # replaced, resuming from step 10
        ]

        with store.engine.connect() as conn:
            rows = points.by_writer(conn, EXPERIMENT_ID)
        master = [(int(s), float(v)) for r, s, v in rows if r == "master"]
        assert master == [(s, 100.0 + s) for s in range(10)] + [(s, 200.0 + s) for s in range(10, 20)]
        assert [(int(s), float(v)) for r, s, v in rows if r == "worker-0"] == [
            (s, 1000.0 + s) for s in range(20)
        ]
        assert store.metric_view(EXPERIMENT_ID, "loss")["train"].count == 40
        said = ["master starts as attempt 0", "worker-0 starts as attempt 0", "attempt 1", "attempt 2"]
        for console, says in zip(consoles, said, strict=True):
            assert says in console
        # `phalanx get` (and the API's run details) show how often Kubernetes restarted each pod
        from phalanx.cli.details import run_details_text

        assert store.replica_starts(EXPERIMENT_ID) == {"master": 2, "worker-0": 0}
        details = store.run_details(EXPERIMENT_ID)
        assert details["pod_attempts"] == {"master": 2, "worker-0": 0}
        assert "pod attempts: master 2, worker-0 0" in run_details_text(details)
    finally:
        store.close()
        stop_server(server.proc)


def test_a_pod_fetches_the_bundle_over_http_with_the_token_and_imports_the_sdk(tmp_path: Path) -> None:
    """The fetch-code step, run for real against a real `phalanx server` holding the bundle."""
    from tests.integration.server.serverproc import start_server, stop_server

    home = tmp_path / "server"
    home.mkdir()
    server = start_server(home, token="s3cret")
    try:
        from phalanx.store import open_store

        store = open_store(Settings(home=home))
        exp = store.create_experiment(name="k8s", project="p", experiment_id=EXPERIMENT_ID)
        src = tmp_path / "exp"
        src.mkdir()
        (src / "train.py").write_text("from phalanx import Task\nprint('sdk', Task.__name__)\n")
        engine = KubernetesBackend(
            Settings(home=tmp_path / "client", token="s3cret"),
            Cluster(name="k", kind="kubernetes", server_url=server.url),
        )
        url = engine.upload_code(replace(context(), workdir=str(src)))
        assert url == f"{server.url}/api/v1/experiments/{exp.id}/files/_phalanx/code.tar.gz"

        pod = tmp_path / "pod"
        env = {"PATH": os.environ["PATH"], "PHALANX_TOKEN": "s3cret"}
        argv = [sys.executable if a == "python" else a for a in kube_code.fetch_argv(url)]
        argv[-1] = str(pod)
        subprocess.run(argv, env=env, check=True, timeout=60, capture_output=True)
        run = subprocess.run(
            [sys.executable, "-s", "train.py"],
            cwd=pod,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(pod / ".phalanx-sdk")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.stdout.strip() == "sdk Task", run.stderr
        wrong = subprocess.run(argv, env={**env, "PHALANX_TOKEN": "nope"}, capture_output=True, timeout=60)
        assert wrong.returncode == 1 and b"401" in wrong.stderr
        assert b"(attempt 2)" not in wrong.stderr  # a refused token is final: no back-off
    finally:
        stop_server(server.proc)


def test_the_environment_is_built_once_by_the_first_of_several_pods(tmp_path: Path) -> None:
    p = replace(plan(), build=Build(build_steps=("echo built >> $COUNTER",), pip_packages=()))
    digest = kube_code.env_hash(p)
    assert digest
    envs, code = tmp_path / "envs", tmp_path / "code"
    code.mkdir()
    argv = [sys.executable, str(SLOTS.with_name("podenv.py")), *kube_code.build_env_argv(p, digest)[2:]]
    argv[2], argv[-1] = str(envs / digest), str(code)
    counter = tmp_path / "count"
    env = {**os.environ, "COUNTER": str(counter)}
    pods = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE) for _ in range(3)]  # three pods at once
    assert [pod.wait(timeout=60) for pod in pods] == [0, 0, 0]
    assert counter.read_text() == "built\n"  # built once, the others waited and reused it
    assert (envs / digest / ".ready").exists()
    assert subprocess.run(argv, env=env, timeout=60).returncode == 0  # a restart reuses it too
    assert counter.read_text() == "built\n"


def test_the_slot_launcher_starts_k_processes_with_torchrun_ranks(tmp_path: Path) -> None:
    proc = _slots(
        tmp_path,
        'echo "$RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $PHALANX_REPLICA"',
        PHALANX_PROCESSES="2",
        PET_NODE_RANK="2",
        PET_NNODES="3",
        PET_MASTER_ADDR="m.svc",
    )
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert sorted(out.split("\n")[:2]) == ["4 0 6 m.svc worker-1", "5 1 6 m.svc worker-1"]


def test_one_failing_slot_stops_the_others_and_the_pod_fails_with_its_code(tmp_path: Path) -> None:
    command = 'if [ "$LOCAL_RANK" = 1 ]; then exit 3; fi; sleep 300'
    proc = _slots(tmp_path, command, PHALANX_PROCESSES="2")
    assert proc.wait(timeout=120) == 3  # the bound proves it: the healthy slot would sleep 300 s
