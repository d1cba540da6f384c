"""The Kubeflow engine: each training-operator job from the same plan, validated as the API server
and the operator would; what a job cannot express is refused; conditions map to states."""

from __future__ import annotations

import copy

import pytest

from phalanx.backends.kubeflow import JOB_CONDITIONS, KubeflowBackend, job_problems
from phalanx.clusters import Cluster
from phalanx.config import Settings
from phalanx.domain import BackendKind, ExperimentStatus, Framework, ReplicaState
from phalanx.errors import SpecError
from phalanx.spec.model import ReplicaTemplate
from tests.support.fake_kube import FakeKubernetesAPI
from tests.unit.backends.conftest import EXPERIMENT_ID, SERVER, CodeShelf, context, plan, resources

NAME = f"phx-{EXPERIMENT_ID}"


def backend(api: FakeKubernetesAPI | None = None) -> KubeflowBackend:
    return KubeflowBackend(
        Settings(home="/tmp/h"),
        Cluster(name="k", kind="kubernetes", server_url=SERVER),
        api=api,
        put_code=CodeShelf(),
    )


def job(p) -> dict:  # type: ignore[no-untyped-def]
    return backend().dry_run(p, context()).native[0]


@pytest.mark.parametrize(
    ("framework", "backend_kind", "kind", "types", "container"),
    [
        (Framework.PYTORCH, BackendKind.KUBEFLOW, "PyTorchJob", {"Master", "Worker"}, "pytorch"),
        (Framework.TENSORFLOW, BackendKind.KUBEFLOW, "TFJob", {"Chief", "Worker", "PS"}, "tensorflow"),
        (Framework.MXNET, BackendKind.KUBEFLOW, "MXJob", {"Scheduler", "Worker", "Server"}, "mxnet"),
        (Framework.HOROVOD, BackendKind.KUBEFLOW, "MPIJob", {"Launcher", "Worker"}, "mpi"),
        (Framework.TENSORFLOW, BackendKind.MPI, "MPIJob", {"Launcher", "Worker"}, "mpi"),
    ],
)
def test_each_framework_becomes_its_operators_job(framework, backend_kind, kind, types, container) -> None:  # type: ignore[no-untyped-def]
    ps = 1 if kind in ("TFJob", "MXJob") else 0
    j = job(plan(framework=framework, workers=2, ps=ps, backend=backend_kind))
    assert j["kind"] == kind
    assert j["apiVersion"] == ("kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1")
    field = next(k for k in j["spec"] if k.endswith("ReplicaSpecs"))
    assert set(j["spec"][field]) == types
    assert j["spec"][field]["Worker"]["replicas"] == 2
    for rs in j["spec"][field].values():
        assert rs["template"]["spec"]["containers"][0]["name"] == container
    assert job_problems(j) == []


def test_run_policy_carries_restarts_deadline_and_gang_scheduling() -> None:
    j = job(plan(workers=3, max_restarts=2, max_run_seconds=3600))
    assert j["spec"]["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "backoffLimit": 2,
        "schedulingPolicy": {"minAvailable": 4},
        "activeDeadlineSeconds": 3600,
    }
    assert j["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"


def test_each_pod_learns_its_replica_from_the_operators_labels() -> None:
    worker = job(plan(workers=2))["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
        0
    ]
    env = {e["name"]: e for e in worker["env"]}
    assert "training.kubeflow.org/replica-index" in env["PHALANX_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert env["PHALANX_REPLICA"]["value"] == "worker-$(PHALANX_INDEX)"
    assert 'export PHALANX_RANK="$((PHALANX_INDEX + 1))"; python -u train.py' in worker["command"][-1]


def test_per_index_overrides_that_differ_within_a_role_are_refused_with_why() -> None:
    p = plan(workers=3, worker={1: ReplicaTemplate(resources=resources(memory=4096))})
    with pytest.raises(SpecError, match=r"worker-1 differs from worker-0.*one pod\s+template per role"):
        job(p)


def test_equal_overrides_are_fine() -> None:
    same = ReplicaTemplate(resources=resources(memory=512))
    assert job(plan(workers=2, default_worker=same, worker={1: same}))["kind"] == "PyTorchJob"


def test_parameter_servers_have_no_place_in_a_pytorchjob() -> None:
    with pytest.raises(SpecError, match="PyTorchJob has no place for ps"):
        job(plan(workers=1, ps=1))


def test_schema_validation_rejects_unknown_and_mistyped_fields() -> None:
    good = job(plan(workers=1))
    bad = copy.deepcopy(good)
    bad["spec"]["runPolicy"]["cleanupPolicy"] = "All"
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    problems = job_problems(bad)
    assert any("cleanupPolicy" in p for p in problems)
    assert any("'two' is not of type 'integer'" in p for p in problems)


def test_the_operators_own_rules_are_checked() -> None:
    bad = copy.deepcopy(job(plan(workers=1)))
    specs = bad["spec"]["pytorchReplicaSpecs"]
    specs["Master"]["replicas"] = 2
    specs["Chief"] = copy.deepcopy(specs["Worker"])
    specs["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    problems = job_problems(bad)
    assert any("only 1 master" in p for p in problems)
    assert any("Chief is not a PyTorchJob replica type" in p for p in problems)
    assert any("container named 'pytorch'" in p for p in problems)


def test_a_tfjob_with_both_chief_and_master_is_refused() -> None:
    bad = copy.deepcopy(job(plan(framework=Framework.TENSORFLOW, workers=1)))
    bad["spec"]["tfReplicaSpecs"]["Master"] = copy.deepcopy(bad["spec"]["tfReplicaSpecs"]["Chief"])
    assert any("either a Chief or a Master" in p for p in job_problems(bad))


# -- controller against the fake --------------------------------------------------------------
def test_conditions_map_to_states_and_pods_to_replicas() -> None:
    api = FakeKubernetesAPI()
    b = backend(api)
    handle = b.submit(b.dry_run(plan(workers=1), context()))
    assert handle == f"default/PyTorchJob/{EXPERIMENT_ID}"
    assert b.describe(handle).status is ExperimentStatus.CREATED  # type: ignore[union-attr]
    api.set_condition("PyTorchJob", NAME, "Created")
    assert b.describe(handle).status is ExperimentStatus.STARTING  # type: ignore[union-attr]
    pods = api.run_operator("PyTorchJob", NAME)
    assert pods == [f"{NAME}-master-0", f"{NAME}-worker-0"]
    for pod in pods:
        api.start(pod)
    api.set_condition("PyTorchJob", NAME, "Running")
    job_status = b.describe(handle)
    assert job_status.status is ExperimentStatus.RUNNING  # type: ignore[union-attr]
    assert {r.name: r.state for r in job_status.replicas} == {  # type: ignore[union-attr]
        "master": ReplicaState.RUNNING,
        "worker-0": ReplicaState.RUNNING,
    }
    api.log(f"{NAME}-worker-0", "hello from worker")
    assert list(b.logs(handle, "worker-0")) == ["hello from worker"]
    api.finish(f"{NAME}-worker-0", 3)
    api.set_condition(
        "PyTorchJob", NAME, "Failed", message="PyTorchJob phx has failed because 1 Worker replica(s) failed."
    )
    final = b.describe(handle)
    assert final.status is ExperimentStatus.FAILED  # type: ignore[union-attr]
    assert "Worker replica(s) failed" in (final.reason or "")  # type: ignore[union-attr]
    b.cancel(handle)
    b.cancel(handle)
    assert api.objects == {}  # the job and, by garbage collection, its pods
    assert b.describe(handle) is None


def test_every_condition_the_operator_sets_is_mapped() -> None:
    assert set(JOB_CONDITIONS) >= {"Created", "Running", "Restarting", "Succeeded", "Failed"}


def test_the_operator_restarts_so_the_supervisor_must_not() -> None:
    assert KubeflowBackend.restarts_itself is True


def test_processes_per_replica_become_torchruns_nproc_per_node_or_mpi_slots() -> None:
    from dataclasses import replace

    def with_processes(p, k: int):  # type: ignore[no-untyped-def]
        return replace(p, replicas=tuple(replace(r, processes=k) for r in p.replicas))

    torch = job(with_processes(plan(workers=1), 4))
    assert torch["spec"]["nprocPerNode"] == "4"
    # Something must start the 4 processes: the slot launcher shipped in the code bundle does.
    master = torch["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert master["command"][-1].endswith("exec python /phalanx/code/.phalanx-sdk/phalanx_slots.py")
    assert {"name": "PHALANX_COMMAND", "value": "python -u train.py"} in master["env"]
    mpi = job(with_processes(plan(framework=Framework.HOROVOD, workers=1), 2))
    assert mpi["spec"]["slotsPerWorker"] == 2
    with pytest.raises(SpecError, match="one process per replica"):
        job(with_processes(plan(framework=Framework.TENSORFLOW, workers=1), 2))
