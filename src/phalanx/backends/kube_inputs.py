"""Data inputs in Kubernetes pods: an init container ``fetch-inputs`` fetches every download input
into an emptyDir at ``/phalanx/inputs`` before the replica's container starts, which reads it there
(mounted read-only) through ``PHALANX_INPUT_<NAME>``.

Why this shape: the submitting machine's cache does not exist in a pod, and a pod has neither s3fs
nor cloud credentials. So, like ``fetch-code`` (``kube_code``), the step runs in the replica's own
image with Python's standard library only and the experiment's token, and reads each file from the
Phalanx server (``GET /api/v1/experiments/{id}/inputs/{name}/files/{path}``, which reads the data
where it is); every file is checked against its recorded sha256 on the way (a changed file fails
the pod, exit 2, never used). The same orders the Slurm nodes get (``inputs.fetch_order``) say what
to fetch. One fetch per pod: the emptyDir is the pod's own. Native pods and every Kubeflow
operator job get it alike (each pod template of the rendered objects).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from phalanx.backends.kube_code import token_env
from phalanx.errors import SpecError

INPUTS_DIR = "/phalanx/inputs"
INPUTS_VOLUME = "phalanx-inputs"

FETCH_INPUTS = """\
import hashlib, json, os, sys, time, urllib.parse, urllib.request
base, dest, orders = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
token = os.environ.get("PHALANX_TOKEN")
headers = {"Authorization": "Bearer " + token} if token else {}
def get(url, target):
    for attempt in range(6):
        try:
            h = hashlib.sha256()
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as r:
                with open(target, "wb") as out:
                    while True:
                        chunk = r.read(1 << 20)
                        if not chunk:
                            return h.hexdigest()
                        h.update(chunk)
                        out.write(chunk)
        except Exception as exc:
            print("fetch-inputs: %s: %s (attempt %d)" % (url, exc, attempt + 1), file=sys.stderr)
            if attempt == 5 or getattr(exc, "code", 0) in (401, 403, 404):
                sys.exit(1)
            time.sleep(2 ** attempt)
for o in orders:
    final = os.path.join(dest, o["key"])
    for path, size, sha in o["files"]:
        target = os.path.join(final, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        url = base + "/" + urllib.parse.quote(o["name"]) + "/files/" + urllib.parse.quote(path)
        got = get(url, target)
        if sha and got != sha:
            print("fetch-inputs: %s: file %r changed since the version was recorded; refused"
                  % (o["what"], path), file=sys.stderr)
            sys.exit(2)
        os.chmod(target, 0o444)
    print("fetch-inputs: %s: %d file(s) into %s" % (o["what"], len(o["files"]), final))
"""


def inputs_url(server_url: str, experiment_id: str) -> str:
    return f"{server_url.rstrip('/')}/api/v1/experiments/{quote(experiment_id)}/inputs"


def _pod_specs(value: Any) -> Iterator[dict[str, Any]]:
    """Every pod spec (a mapping with ``containers``) in a rendered object: a Pod's spec, each
    replica template of an operator job."""
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            yield value
            return
        for v in value.values():
            yield from _pod_specs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _pod_specs(v)


def with_inputs(
    objects: Sequence[Mapping[str, Any]],
    orders: Sequence[Mapping[str, Any]],
    server_url: str | None,
    experiment_id: str,
) -> list[dict[str, Any]]:
    """``objects`` with every pod fetching ``orders`` first (unchanged when there are none)."""
    out = [copy.deepcopy(dict(o)) for o in objects]
    if not orders:
        return out
    if not server_url:
        raise SpecError("inputs: pods fetch their data through the Phalanx server; the cluster names none")
    url = inputs_url(server_url, experiment_id)
    env = [{"name": str(o["env"]), "value": f"{INPUTS_DIR}/{o['key']}"} for o in orders]
    specs = [s for o in out for s in _pod_specs(o)]
    if not specs:
        raise SpecError(
            "inputs: this engine's objects hold no pod template to add the fetch-inputs step to "
            "(Kubeflow Trainer v2); use a datastore on a volume every pod mounts (mode: mount)"
        )
    for spec in specs:
        image = spec["containers"][0].get("image")
        fetch = {
            "name": "fetch-inputs",
            "image": image,
            "command": ["python", "-c", FETCH_INPUTS, url, INPUTS_DIR, json.dumps(list(orders))],
            "env": [token_env()],
            "volumeMounts": [{"name": INPUTS_VOLUME, "mountPath": INPUTS_DIR}],
        }
        spec["initContainers"] = [*spec.get("initContainers", []), fetch]
        spec["volumes"] = [*spec.get("volumes", []), {"name": INPUTS_VOLUME, "emptyDir": {}}]
        for c in spec["containers"]:
            c["volumeMounts"] = [
                *c.get("volumeMounts", []),
                {"name": INPUTS_VOLUME, "mountPath": INPUTS_DIR, "readOnly": True},
            ]
            c["env"] = [*c.get("env", []), *env]
    return out
