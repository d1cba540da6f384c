"""Estimator, PyTorch, TensorFlow: seed 004's Python door into the same ExperimentSpec the file builds.

Everything is checked in the constructor, so a mistake surfaces at the line that made it and before
anything starts: one SpecError lists every problem, each naming the parameter and the fix. The mapping
to the file's model is deliberately small (docs/estimators.md shows both forms side by side):

- node_count N            -> the master plus N-1 workers (the master is node 0, rank 0)
- process_count_per_node  -> topology.processes_per_replica (torchrun's --nproc_per_node)
- distributed_backend mpi -> backend: mpi (one mpirun over every slot); on PyTorch and the plain
                             Estimator also framework: horovod (Horovod built into the venv)
- the environment          -> pip_packages plus the framework (frameworks/packages.py)
- TensorFlow worker_count -> the master (TF_CONFIG's chief) plus worker_count-1 workers, as Azure's
                             TensorflowConfiguration counts them; parameter_server_count -> n_ps
- use_gpu                 -> one GPU per process, on every replica but parameter servers
"""

from __future__ import annotations

import inspect
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from phalanx.checkpoints import Policy, PolicyError
from phalanx.domain import BackendKind, Framework, Resources
from phalanx.errors import Problem, SpecError, UsageError
from phalanx.estimators.distribution import Distribution
from phalanx.estimators.resources import parse_resources, with_gpus
from phalanx.estimators.topology import TopologyArgs, did_you_mean, resolve_topology
from phalanx.frameworks.packages import framework_packages
from phalanx.spec.dump import spec_to_yaml
from phalanx.spec.inputs import parse_inputs, shell_ref
from phalanx.spec.model import Build, ExperimentSpec, ReplicaTemplate, Topology
from phalanx.spec.reserved import reserved_reason

_CONDA = {
    "conda_packages": "pip_packages=[...]",
    "conda_dependencies_file": "pip_requirements_file='requirements.txt'",
    "conda_dependencies_file_path": "pip_requirements_file='requirements.txt'",
}
_ALIASES = {  # Azure spellings accepted as they are
    "pip_requirements_file_path": "pip_requirements_file",
    "distributed_training": "distribution",
    "distributed_job_config": "distribution",
    "custom_docker_image": "image",
    "script": "entry_script",
    "arguments": "script_params",
}
_UNSUPPORTED = {
    "vm_size": "Phalanx creates no machines; name a configured cluster with compute_target= "
    "(`phalanx cluster ls`)",
    "vm_priority": "Phalanx creates no machines; name a configured cluster with compute_target=",
    "use_docker": "replicas run in a per-experiment venv (pip_packages); set image= for cluster engines",
    "custom_docker_base_image": "set image= (used by the Kubernetes and Kubeflow backends)",
    "user_managed": "an experiment without pip_packages runs in Phalanx's own interpreter",
    "framework_version": "pin the framework with pip_packages=['torch==2.13.0']",
    "environment_definition": "use pip_packages, pip_requirements_file and environment_variables",
    "source_directory_data_store": "replicas read source_directory where it is",
    "shm_size": "not needed: replicas run as processes or pods of the chosen backend",
}


class Estimator:
    """A training script and how to run it: seed 004's Estimator, framework-neutral.

    Args (all keyword-only but source_directory; Azure's names):
        source_directory: folder holding the script and what it imports; replicas start there.
        entry_script: the script to run, relative to source_directory.
        script_params: ``{"--lr": 0.1, "--verbose": ""}`` -> ``--lr 0.1 --verbose`` ("" or True is a
            bare flag, False or None leaves the flag out, a list repeats the values); a list of strings
            is passed as it is.
        compute_target: "local" (this machine) or the name of a cluster from `phalanx cluster ls`.
        node_count, process_count_per_node, distributed_backend: the topology (see the module doc).
        distribution: a PyTorchDistribution / MpiDistribution / TensorFlowDistribution instead.
        pip_packages, pip_requirements_file: the experiment's own cached venv.
        environment_variables: extra environment for every process.
        use_gpu: one GPU per process.  resources: ``{"cpu": 2, "memory": "2Gi", "gpu": 1}`` per replica.
        max_run_duration_seconds: the experiment is stopped after this long.
        image: a container image for cluster engines (Azure's custom_docker_image).
        checkpoint_policy: which checkpoints the store keeps, e.g. ``{"keep_last": 3, "keep_best": 1,
            "metric": "accuracy"}`` (the file's run.checkpoints).
        resume_from: an experiment id (or Run) whose latest checkpoint this one starts from
            (``task.latest_checkpoint()`` returns it), or the path of a checkpoint file.
    Raises:
        SpecError: every problem found, each naming the parameter and the fix.
    """

    framework: ClassVar[Framework | None] = None
    backends: ClassVar[tuple[str, ...]] = ("mpi",)

    def __init__(
        self,
        source_directory: str | Path,
        *,
        entry_script: str | Path | None = None,
        script_params: Mapping[str, Any] | Sequence[str] | None = None,
        compute_target: str | None = "local",
        node_count: int | None = None,
        process_count_per_node: int | None = None,
        distributed_backend: str | None = None,
        distribution: Distribution | None = None,
        pip_packages: Sequence[str] | None = None,
        pip_requirements_file: str | Path | None = None,
        environment_variables: Mapping[str, Any] | None = None,
        use_gpu: bool = False,
        max_run_duration_seconds: float | None = None,
        resources: Mapping[str, Any] | Resources | None = None,
        image: str | None = None,
        checkpoint_policy: Mapping[str, Any] | None = None,
        resume_from: Any = None,
        inputs: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        problems: list[Problem] = []
        given = dict(
            entry_script=entry_script,
            script_params=script_params,
            distribution=distribution,
            pip_requirements_file=pip_requirements_file,
            image=image,
        )
        worker_count = kwargs.pop("worker_count", None)
        parameter_server_count = kwargs.pop("parameter_server_count", None)
        for key, value in kwargs.items():
            if key in _CONDA:
                problems.append(
                    Problem(
                        "Phalanx installs packages with pip, not conda; pass them as "
                        f"{_CONDA[key]} (a per-experiment venv, cached and reused)",
                        key,
                    )
                )
            elif key in _ALIASES and given.get(_ALIASES[key]) is None:
                given[_ALIASES[key]] = value
            elif key in _ALIASES:
                problems.append(Problem(f"give either {key} or {_ALIASES[key]}, not both", key))
            elif key in _UNSUPPORTED:
                problems.append(Problem(f"not supported by Phalanx: {_UNSUPPORTED[key]}", key))
            else:
                known = [*self._parameters(), *_ALIASES]
                problems.append(
                    Problem(
                        f"unknown parameter{did_you_mean(key, known)}; see help({type(self).__name__})", key
                    )
                )

        self.source_directory = self._source_directory(source_directory, problems)
        self.entry_script = self._entry_script(given["entry_script"], problems)
        self.arguments = self._arguments(given["script_params"], problems)
        self.declared, self.template = declared_arguments(given["script_params"], self.arguments)
        self.inputs = self._inputs(inputs, given["script_params"], problems)
        self.compute_target = self._compute_target(compute_target, problems)
        self.use_gpu = bool(use_gpu)
        self.pip_packages = self._pip_packages(pip_packages, problems)
        self.pip_requirements_file = self._requirements(given["pip_requirements_file"], problems)
        self.environment_variables = self._environment(environment_variables, problems)
        self.max_run_duration_seconds = self._duration(max_run_duration_seconds, problems)
        self.image = given["image"] if isinstance(given["image"], str) and given["image"] else None
        parsed, resource_problems = parse_resources(resources)
        problems.extend(resource_problems)
        self.resources: Resources | None = parsed
        topology = TopologyArgs(
            node_count=node_count,
            process_count_per_node=process_count_per_node,
            distributed_backend=distributed_backend,
            worker_count=worker_count,
            parameter_server_count=parameter_server_count,
            distribution=given["distribution"],
        )
        self.backend, self.n_workers, self.n_ps, self.processes = self._topology(topology, problems)
        self.checkpoint_policy = self._checkpoint_policy(checkpoint_policy, problems)
        self.resume_from = self._resume_from(resume_from, problems)
        if problems:
            raise SpecError(problems)

    # -- the parameters, one checker each ------------------------------------------------------

    @classmethod
    def _parameters(cls) -> list[str]:
        names = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "kwargs")]
        return [*names, "worker_count", "parameter_server_count"]

    @staticmethod
    def _checkpoint_policy(value: Any, problems: list[Problem]) -> dict[str, Any] | None:
        """{"keep_last": 3, "keep_best": 1, "metric": "accuracy", "mode": "max"}: the file's
        run.checkpoints (docs/checkpoints.md)."""
        if value is None:
            return None
        try:
            return Policy.parse(value, "checkpoint_policy").to_json() or None
        except PolicyError as exc:
            problems.extend(
                Problem(f"{path}: {message}", "checkpoint_policy") for path, message in exc.problems
            )
            return None

    @staticmethod
    def _resume_from(value: Any, problems: list[Problem]) -> str | None:
        """An experiment id (or a Run) whose latest checkpoint the new experiment starts from, or a
        checkpoint file; resolved at submit (Experiment.submit)."""
        if value is None:
            return None
        value = getattr(value, "id", value)  # a Run
        if isinstance(value, Path):
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            problems.append(
                Problem("give an experiment id, a Run, or the path of a checkpoint file", "resume_from")
            )
            return None
        return value.strip()

    @staticmethod
    def _source_directory(value: Any, problems: list[Problem]) -> Path:
        if not isinstance(value, str | Path) or not str(value):
            problems.append(Problem("give the folder that holds your training script", "source_directory"))
            return Path.cwd()
        path = Path(value).expanduser().resolve()
        if not path.is_dir():
            what = "is a file" if path.exists() else "does not exist"
            problems.append(
                Problem(f"{str(value)!r} {what}; give the folder holding the script", "source_directory")
            )
        return path

    def _entry_script(self, value: Any, problems: list[Problem]) -> str:
        if value is None or not isinstance(value, str | Path) or not str(value):
            problems.append(Problem("give the script to run, e.g. entry_script='train.py'", "entry_script"))
            return ""
        raw = Path(value).expanduser()
        full = (raw if raw.is_absolute() else self.source_directory / raw).resolve()
        if not full.is_relative_to(self.source_directory):
            problems.append(
                Problem(
                    f"{str(value)!r} is not inside source_directory {str(self.source_directory)!r}; "
                    "move the script there or point source_directory at its folder",
                    "entry_script",
                )
            )
            return str(value)
        if not full.is_file():
            problems.append(
                Problem(
                    f"{str(value)!r} not found in {str(self.source_directory)!r}; "
                    "entry_script is relative to source_directory",
                    "entry_script",
                )
            )
        return full.relative_to(self.source_directory).as_posix()

    @staticmethod
    def _arguments(value: Any, problems: list[Problem]) -> tuple[str, ...]:
        if value is None:
            return ()
        args: list[str] = []
        if isinstance(value, Mapping):
            for key, v in value.items():
                if not isinstance(key, str) or not key:
                    problems.append(Problem(f"keys are flags like '--lr', got {key!r}", "script_params"))
                elif v is None or v is False:
                    continue
                elif v == "" or v is True:
                    args.append(key)
                elif isinstance(v, list | tuple):
                    args.extend([key, *(str(x) for x in v)])
                elif isinstance(v, str | int | float | Path) or hasattr(v, "as_input"):
                    args.extend([key, str(v)])  # a Datastore/Dataset: its input's variable
                else:
                    problems.append(
                        Problem(
                            f"{key}: {type(v).__name__} cannot be a command-line value; pass a str",
                            "script_params",
                        )
                    )
        elif isinstance(value, list | tuple) and all(isinstance(a, str | int | float) for a in value):
            args = [str(a) for a in value]
        else:
            problems.append(
                Problem(
                    "give a dict like {'--epochs': 10, '--verbose': ''} or a list of strings", "script_params"
                )
            )
        if any("{{" in a or "}}" in a for a in args):
            problems.append(
                Problem("values cannot contain '{{' or '}}' (the file's placeholders)", "script_params")
            )
        return tuple(args)

    @staticmethod
    def _inputs(value: Any, params: Any, problems: list[Problem]) -> tuple[Any, ...]:
        """``inputs=[...]`` plus every Datastore/Dataset handle given as a script_params value."""
        handles = (
            [v for v in params.values() if hasattr(v, "as_input")] if isinstance(params, Mapping) else []
        )
        try:
            given = parse_inputs(value, "inputs")
            seen = {i.name: i for i in given}
            for handle in handles:
                spec = handle.as_input()
                if seen.setdefault(spec.name, spec) != spec:
                    raise UsageError(f"input {spec.name!r} is given twice with different data")
            return tuple(seen.values())
        except UsageError as exc:
            problems.append(Problem(exc.message, "inputs"))
            return ()

    @staticmethod
    def _compute_target(value: Any, problems: list[Problem]) -> str:
        if value is None:
            return "local"
        if not isinstance(value, str) or not value:
            problems.append(
                Problem("give 'local' or a cluster name from `phalanx cluster ls`", "compute_target")
            )
            return "local"
        return value

    @staticmethod
    def _pip_packages(value: Any, problems: list[Problem]) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str) or not isinstance(value, Sequence):
            problems.append(Problem(f"give a list, e.g. pip_packages=[{value!r}]", "pip_packages"))
            return ()
        bad = [p for p in value if not isinstance(p, str) or not p.strip()]
        if bad:
            problems.append(
                Problem(f"{bad!r} are not package names; give strings like 'numpy==2.4.6'", "pip_packages")
            )
        return tuple(p.strip() for p in value if isinstance(p, str) and p.strip())

    def _requirements(self, value: Any, problems: list[Problem]) -> str | None:
        if value is None:
            return None
        path = (self.source_directory / Path(value).expanduser()).resolve()
        if not path.is_file():
            problems.append(
                Problem(
                    f"{str(value)!r} not found; it is read relative to source_directory",
                    "pip_requirements_file",
                )
            )
        return str(path)

    @staticmethod
    def _environment(value: Any, problems: list[Problem]) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            problems.append(Problem("give a dict of names to values", "environment_variables"))
            return {}
        env: dict[str, str] = {}
        for key, v in value.items():
            if not isinstance(key, str) or not key.replace("_", "a").isalnum() or key[0].isdigit():
                problems.append(Problem(f"{key!r} is not a variable name", "environment_variables"))
            elif reserved_reason(key) is not None:
                problems.append(Problem(str(reserved_reason(key)), "environment_variables"))
            elif v is None or isinstance(v, Mapping | list | tuple):
                problems.append(Problem(f"{key}: give a string value", "environment_variables"))
            else:
                env[key] = str(v)
        return env

    @staticmethod
    def _duration(value: Any, problems: list[Problem]) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            problems.append(
                Problem(f"{value!r}: give a positive number of seconds, or None", "max_run_duration_seconds")
            )
            return None
        return float(value)

    def _topology(self, t: TopologyArgs, problems: list[Problem]) -> tuple[str | None, int, int, int]:
        """-> (distributed backend, n_workers, n_ps, processes per replica)."""
        return resolve_topology(type(self).__name__, self.framework, self.backends, self.use_gpu, t, problems)

    # -- the spec -------------------------------------------------------------------------------

    @property
    def command(self) -> str:
        """The shell command every process runs (`python` is the experiment's interpreter)."""
        return self._words(self.arguments)

    def _words(self, arguments: Sequence[str], placeholders: frozenset[str] = frozenset()) -> str:
        refs = {shell_ref(i.name) for i in self.inputs}
        words = ["python", self.entry_script, *arguments]
        # an input's variable is expanded by the replica's shell: double quotes, not shlex's single;
        # a declared param's {{ NAME }} is quoted by the plan for where it stands
        return " ".join(f'"{w}"' if w in refs else w if w in placeholders else shlex.quote(w) for w in words)

    def to_spec(
        self, name: str | None = None, project: str | None = None, tags: Sequence[str] = ()
    ) -> ExperimentSpec:
        """The ExperimentSpec the equivalent experiment file loads to."""
        framework = self.framework
        if framework is None and self.backend in ("gloo", "nccl"):
            framework = Framework.PYTORCH
        elif framework in (None, Framework.PYTORCH) and self.backend == "mpi":
            # Azure's MPI training is Horovod ("Horovod and its dependencies will be installed for
            # you"): the file's framework horovod builds it into the experiment's venv
            framework = Framework.HOROVOD
        gpus = self.processes if self.use_gpu else 0
        trainer = with_gpus(self.resources, gpus) if gpus else self.resources
        ps = self.resources
        if ps is not None and self.use_gpu and self.n_ps:
            ps = Resources(cpu=ps.cpu, memory=ps.memory)
        placeholders = frozenset(f"{{{{ {name} }}}}" for name in self.declared)
        return ExperimentSpec(
            version=1,
            kind="experiment",
            command=(self._words(self.template, placeholders),),
            framework=framework,
            backend=BackendKind.MPI if self.backend == "mpi" else None,
            name=name or Path(self.entry_script).stem or None,
            project=project,
            tags=tuple(tags),
            params=dict(self.declared),
            master=ReplicaTemplate(resources=trainer),
            topology=Topology(
                n_workers=self.n_workers,
                n_ps=self.n_ps,
                default_worker=ReplicaTemplate(resources=trainer) if self.n_workers and trainer else None,
                default_ps=ReplicaTemplate(resources=ps) if self.n_ps and ps else None,
                processes_per_replica=self.processes,
            ),
            build=Build(
                image=self.image,
                pip_packages=framework_packages(framework, self.pip_packages, self.pip_requirements_file),
                requirements=self.pip_requirements_file,
            ),
            env=dict(self.environment_variables),
            max_run_seconds=self.max_run_duration_seconds,
            checkpoints=self.checkpoint_policy,
            inputs=tuple(self.inputs),
        )

    def to_yaml(self, name: str | None = None, project: str | None = None, tags: Sequence[str] = ()) -> str:
        """The experiment file that says the same thing: `phalanx run -f` on it gives the same plan
        (run it from source_directory, or pass `--workdir`)."""
        return spec_to_yaml(self.to_spec(name=name, project=project, tags=tags))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(source_directory={str(self.source_directory)!r}, "
            f"entry_script={self.entry_script!r}, node_count={self.n_workers + 1}, "
            f"process_count_per_node={self.processes}, distributed_backend={self.backend!r})"
        )


def param_name(flag: str) -> str:
    """The param a flag declares: ``--lr`` -> ``lr``, ``--data-dir`` -> ``data_dir``."""
    return flag.lstrip("-").replace("-", "_")


_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def declared_arguments(script_params: Any, arguments: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """``script_params`` as declared params, as an experiment file's ``params`` are: each ``--flag
    VALUE`` whose value is a number or text (not a switch, a list or a data handle) becomes the param
    named after the flag (``--lr 0.1`` -> ``lr: 0.1``) and the command's argument its placeholder
    (``--lr {{ lr }}``), which the plan fills with the same text. So `phalanx params` shows it, the
    run table filters it (``param:lr``) and `phalanx rerun ID --param lr=0.2` changes it. Returns the
    params and the arguments with the placeholders (``arguments`` as they are when there is none)."""
    if not isinstance(script_params, Mapping):
        return {}, list(arguments)
    declared: dict[str, Any] = {}
    template: list[str] = []
    for key, v in script_params.items():
        if v is None or v is False:
            continue
        if v == "" or v is True:
            template.append(key)
        elif isinstance(v, list | tuple):
            template.extend([key, *(str(x) for x in v)])
        elif isinstance(v, str | int | float | Path) and not hasattr(v, "as_input"):
            name = param_name(key)
            value = str(v) if isinstance(v, Path) else v
            if _PARAM_NAME.match(name) and name not in declared:
                declared[name] = value
                template.extend([key, f"{{{{ {name} }}}}"])
            else:
                template.extend([key, str(v)])
        else:
            template.extend([key, str(v)])
    return declared, template


class PyTorch(Estimator):
    """seed 004's PyTorch estimator: torch.distributed wiring (MASTER_ADDR, RANK, LOCAL_RANK, ...);
    distributed_backend='mpi' is Horovod over mpirun (framework horovod). With pip_packages its venv
    still holds torch and what save_model's ONNX export needs."""

    framework = Framework.PYTORCH
    backends = ("gloo", "nccl", "mpi")


class TensorFlow(Estimator):
    """TensorFlow: TF_CONFIG wiring; distributed_backend 'ps' (worker_count, parameter_server_count;
    parameter_server_count=0 is MultiWorkerMirroredStrategy) or 'mpi' (one mpirun over every slot,
    for mpi4py-style scripts: Phalanx's Horovod build has only the PyTorch extension, see
    docs/horovod.md). Its venv always holds TensorFlow (tensorflow-cpu unless pip_packages names one)."""

    framework = Framework.TENSORFLOW
    backends = ("ps", "mpi")
