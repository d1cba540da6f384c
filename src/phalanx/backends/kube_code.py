"""How an experiment's code, its Python environment and the tracking SDK reach a pod.

A pod cannot see the submitting machine's folders, and installing ``pip_packages`` at every pod
start costs minutes per replica and restart. So:

- Code: at submit, the experiment's folder (the file's directory or --workdir) and the standard-library
  tracking SDK are packed into one bundle (``bundle()``; the same skips and cap as a snapshot) and
  stored with the experiment on the Phalanx server (``PUT .../files/_phalanx/code.tar.gz``). An init
  container ``fetch-code`` — the replica's own image, Python's standard library only — downloads it
  with the experiment's token and unpacks it into an emptyDir at ``/phalanx/code``, where the replica
  starts, with the SDK on PYTHONPATH. The dry run shows the URL; nothing is fetched from this machine.
- Environment: ``pip_packages`` (and ``build_steps``, which run with ``PIP_TARGET`` pointing into it)
  are built once per environment — keyed by the hash of image, packages and steps — into a
  ReadWriteMany volume the cluster names (``phalanx cluster add ... --env-volume PVC``), under
  ``/phalanx/envs/<hash>``, by the first pod that needs it under a file lock; later pods and restarts
  find it ready. A cluster without such a volume must name an image that already holds the packages
  (``build.image``): refused otherwise, since a per-pod install is what this avoids.
- Reporting: replicas report to the cluster's server URL; without one a pod could neither fetch its
  code nor deliver a metric, so it is refused before anything is created.
- Attempts: each start of the main container (the first, a restart in place, a replaced pod) asks
  the server for its ``PHALANX_ATTEMPT`` first (``phalanx_attempt.py``, from ``backends/podattempt.py``),
  so steps a restarted replica reports again replace the earlier ones instead of repeating them.

Kubeflow Trainer v2 cannot add init containers through ``runtimePatches``, so there the same two steps
run at the head of the trainer's command (``inline_setup``): one mechanism, two placements.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import shlex
import tarfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from phalanx.backends.kube_objects import TOKEN_SECRET
from phalanx.codeignore import IgnoreRules, skipped_dir
from phalanx.config import Settings
from phalanx.errors import BackendUnavailable, Problem, SpecError
from phalanx.machine.box import read_file
from phalanx.plan import Plan
from phalanx.sdkcopy import sdk_path
from phalanx.spec.model import REQUIREMENTS_MAX_BYTES

CODE_DIR = "/phalanx/code"
ENVS_DIR = "/phalanx/envs"
SDK_DIR = f"{CODE_DIR}/.phalanx-sdk"
SLOTS = f"{SDK_DIR}/phalanx_slots.py"
ENV_BUILDER = f"{SDK_DIR}/phalanx_env.py"
ATTEMPT = f"{SDK_DIR}/phalanx_attempt.py"
BUNDLE_PATH = "_phalanx/code.tar.gz"  # under the experiment's files on the server
CODE_VOLUME = "phalanx-code"
ENV_VOLUME = "phalanx-envs"
BUNDLE_CAP = 64 << 20  # bytes of source packed; more is almost always data that belongs elsewhere
SKIP_FILE_BYTES = 16 << 20  # one file bigger than this is data, not code


def require_server(server_url: str | None, engine: str) -> str:
    """The URL replicas fetch their code from and report to; SpecError when the cluster has none."""
    if not server_url:
        raise SpecError(
            [
                Problem(
                    f"a {engine} cluster needs a Phalanx server its pods can reach: they fetch the "
                    "experiment's code from it and report every metric to it (without one, both would "
                    "be lost); register it with `phalanx cluster add NAME --kind kubernetes "
                    "--server-url http://phalanx.NAMESPACE.svc:8000 ...` (or `--replace` an existing one)"
                )
            ]
        )
    return server_url.rstrip("/")


def bundle_url(server_url: str, experiment_id: str) -> str:
    return f"{server_url.rstrip('/')}/api/v1/experiments/{experiment_id}/files/{BUNDLE_PATH}"


def setup_steps(plan: Plan) -> tuple[str, ...]:
    """build_steps, with the requirements file (shipped in the bundle) installed first."""
    first = (f"pip install -r {shlex.quote(plan.build.requirements)}",) if plan.build.requirements else ()
    return (*first, *plan.build.build_steps)


def env_hash(plan: Plan, workdir: str | None = None) -> str | None:
    """The environment's identity (None: the image is used as it is): image, packages, steps and
    the requirements file's content when it can be read here."""
    if not plan.build.pip_packages and not setup_steps(plan):
        return None
    digest = hashlib.sha256()
    if plan.build.requirements and workdir:
        with contextlib.suppress(OSError):  # a missing file: pip says so in the build-env step
            digest.update(read_file(Path(workdir) / plan.build.requirements, REQUIREMENTS_MAX_BYTES))
    for part in (plan.build.image or "", *plan.build.pip_packages, "\0", *setup_steps(plan)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def check_environment(plan: Plan, env_volume: str | None, workdir: str | None = None) -> None:
    """Refuse a per-pod install: pip packages need a shared volume to be built once, or an image."""
    if env_hash(plan, workdir) is not None and not env_volume:
        raise SpecError(
            [
                Problem(
                    "build.pip_packages / build.build_steps would be installed again in every pod at every "
                    "start; give the cluster a ReadWriteMany volume to build them once "
                    "(`phalanx cluster add NAME ... --env-volume PVC_NAME`), or build an image that has "
                    "them and name it in build.image (then drop pip_packages and build_steps)"
                )
            ]
        )


# -- the bundle ---------------------------------------------------------------------------------
def _source_files(root: Path) -> Iterator[Path]:
    """The folder's code files, in a stable order: what ``codeignore`` leaves out (version control,
    venvs, caches, data folders, .gitignore, .phalanxignore), links, compiled files and files over
    SKIP_FILE_BYTES stay behind."""
    if not root.is_dir():  # (os.fwalk raises where os.walk yielded nothing)
        return
    rules = IgnoreRules.of_work_tree(root)
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix().removeprefix(".")
        rules.add_folder(rel_dir, dir_fd)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not skipped_dir(d)
            and not (here / d / "pyvenv.cfg").exists()
            and not rules.ignored((here / d).relative_to(root).as_posix(), is_dir=True)
        )
        for name in sorted(filenames):
            path = here / name
            if path.is_symlink() or not path.is_file() or name.endswith((".pyc", ".pyo")):
                continue
            if path.stat().st_size > SKIP_FILE_BYTES or rules.ignored(path.relative_to(root).as_posix()):
                continue
            yield path


def bundle(workdir: Path, sdk: Path, cap: int = BUNDLE_CAP) -> bytes:
    """The experiment's folder plus the tracking SDK and the slot launcher, as a .tar.gz.

    Skips VCS folders, venvs, caches, folders named data/datasets and files over 16 MiB; raises
    SpecError when what is left is over ``cap`` bytes (name the big files so the user can move them).
    """
    files = list(_source_files(workdir))
    total = sum(f.stat().st_size for f in files)
    if total > cap:
        biggest = sorted(files, key=lambda f: f.stat().st_size, reverse=True)[:3]
        names = ", ".join(f"{f.relative_to(workdir)} ({f.stat().st_size >> 20} MiB)" for f in biggest)
        raise SpecError(
            [
                Problem(
                    f"{workdir}: {total >> 20} MiB of files to send to the cluster "
                    f"(the cap is {cap >> 20} MiB; largest: {names}); move data out of the"
                    " experiment's folder and read it from storage"
                    " the pods can reach"
                )
            ]
        )
    buf = io.BytesIO()
    # mtime=0: the gzip header otherwise holds the time of the build, and the same files built a
    # second apart would give different bytes (the bundle is content-addressed)
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for f in files:
            tar.add(f, arcname=str(f.relative_to(workdir)), recursive=False, filter=_plain)
        for f in sorted(sdk.rglob("*.py")):
            tar.add(f, arcname=f".phalanx-sdk/{f.relative_to(sdk)}", recursive=False, filter=_plain)
        for module, name in (
            ("slots.py", "phalanx_slots.py"),
            ("podenv.py", "phalanx_env.py"),
            ("podattempt.py", "phalanx_attempt.py"),
        ):
            tar.add(
                Path(__file__).with_name(module),
                arcname=f".phalanx-sdk/{name}",
                recursive=False,
                filter=_plain,
            )
    return buf.getvalue()


def pack(workdir: str, settings: Settings) -> bytes:
    """The bundle of an experiment's folder with this Phalanx's tracking SDK copy."""
    return bundle(Path(workdir), sdk_path(settings.home))


def put_bundle(url: str, data: bytes, token: str | None) -> None:
    """Store a bundle on the Phalanx server (``PUT``, with the server's token); BackendUnavailable
    when the server does not take it, so nothing is created on the cluster."""
    headers = {"Content-Type": "application/octet-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers, method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()
    except (urllib.error.URLError, OSError) as exc:
        raise BackendUnavailable(
            f"could not store the code bundle at {url} ({exc}); the cluster's nodes fetch their code "
            "from there: check that the server runs and that PHALANX_TOKEN is its token"
        ) from exc


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Same bytes for the same files: no owner, no times (a bundle is content-addressed)."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


# -- what runs in the pod -----------------------------------------------------------------------
# A server that is not up yet or overloaded is waited for (1+2+4+8+16 s); a refused token or a
# missing bundle (4xx but 408/429) will not get better by waiting, so the pod fails at once.
FETCH = """\
import io, os, sys, tarfile, time, urllib.error, urllib.request
url, dest = sys.argv[1], sys.argv[2]
token = os.environ.get("PHALANX_TOKEN")
headers = {{"Authorization": "Bearer " + token}} if token else {{}}
for attempt in range(6):
    try:
        data = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120).read()
        break
    except Exception as exc:
        print("fetch-code: %s: %s (attempt %d)" % (url, exc, attempt + 1), file=sys.stderr)
        code = exc.code if isinstance(exc, urllib.error.HTTPError) else 0
        if 400 <= code < 500 and code not in (408, 429) or attempt == 5:
            sys.exit(1)
        time.sleep(2 ** attempt)
tar = tarfile.open(fileobj=io.BytesIO(data))
kw = {{"filter": "data"}} if hasattr(tarfile, "data_filter") else {{}}
tar.extractall(dest, **kw)
print("fetch-code: %d bytes into %s" % (len(data), dest))
"""


def fetch_argv(url: str) -> list[str]:
    return ["python", "-c", FETCH.format(), url, CODE_DIR]


def build_env_argv(plan: Plan, digest: str) -> list[str]:
    return [
        "python",
        ENV_BUILDER,
        f"{ENVS_DIR}/{digest}",
        "\n".join(plan.build.pip_packages),
        "\n".join(setup_steps(plan)),
        CODE_DIR,
    ]


def env_prefix(plan: Plan, workdir: str | None = None) -> str:
    """Shell lines that put the built environment and the SDK first on the paths."""
    digest = env_hash(plan, workdir)
    paths = ([f"{ENVS_DIR}/{digest}/site"] if digest else []) + [SDK_DIR]
    line = f'export PYTHONPATH="{":".join(paths)}${{PYTHONPATH:+:$PYTHONPATH}}"'
    if digest:
        line += f'; export PATH="{ENVS_DIR}/{digest}/site/bin:$PATH"'
    return line


# Every start of the container asks the server for its attempt number (backends/podattempt.py): a
# restart in place re-runs only this command, a replaced pod runs it again too.
ATTEMPT_LINE = f'PHALANX_ATTEMPT="$(python -E {ATTEMPT})"; export PHALANX_ATTEMPT'  # -E: not the env's path


def replica_command(plan: Plan, command: str, workdir: str | None = None) -> str:
    """What the container's shell runs: the environment first, this start's attempt number, then
    the command, in the code folder."""
    return f"{env_prefix(plan, workdir)}; {ATTEMPT_LINE}; cd {CODE_DIR}; {command}"


def inline_setup(plan: Plan, url: str, workdir: str | None = None) -> str:
    """fetch-code and build-env as shell commands, for placements without init containers."""
    parts = [shlex.join(fetch_argv(url))]
    digest = env_hash(plan, workdir)
    if digest:
        parts.append(shlex.join(build_env_argv(plan, digest)))
    return " && ".join(parts)


def token_env() -> dict[str, Any]:
    return {
        "name": "PHALANX_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": TOKEN_SECRET, "key": "token", "optional": True}},
    }


def volumes(plan: Plan, env_volume: str | None, workdir: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": CODE_VOLUME, "emptyDir": {}}]
    if env_hash(plan, workdir) is not None and env_volume:
        out.append({"name": ENV_VOLUME, "persistentVolumeClaim": {"claimName": env_volume}})
    return out


def mounts(plan: Plan, env_volume: str | None, workdir: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": CODE_VOLUME, "mountPath": CODE_DIR}]
    if env_hash(plan, workdir) is not None and env_volume:
        out.append({"name": ENV_VOLUME, "mountPath": ENVS_DIR})
    return out


def init_containers(
    plan: Plan, image: str, url: str, env_volume: str | None, workdir: str | None = None
) -> list[dict[str, Any]]:
    """fetch-code, then build-env when the plan has packages: both in the replica's own image."""
    out: list[dict[str, Any]] = [
        {
            "name": "fetch-code",
            "image": image,
            "command": fetch_argv(url),
            "env": [token_env()],
            "volumeMounts": mounts(plan, env_volume, workdir)[:1],
        }
    ]
    digest = env_hash(plan, workdir)
    if digest:
        out.append(
            {
                "name": "build-env",
                "image": image,
                "command": build_env_argv(plan, digest),
                "volumeMounts": mounts(plan, env_volume, workdir),
            }
        )
    return out


def with_code(
    pod_spec: Mapping[str, Any],
    plan: Plan,
    image: str,
    url: str,
    env_volume: str | None,
    workdir: str | None = None,
) -> dict[str, Any]:
    """A pod spec with the init containers, volumes and mounts that bring the code and environment."""
    spec = dict(pod_spec)
    spec["initContainers"] = init_containers(plan, image, url, env_volume, workdir)
    spec["volumes"] = volumes(plan, env_volume, workdir)
    spec["containers"] = [
        {**c, "volumeMounts": [*c.get("volumeMounts", []), *mounts(plan, env_volume, workdir)]}
        for c in spec["containers"]
    ]
    return spec
