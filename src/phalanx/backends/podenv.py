"""Build a pod's Python environment once per cluster: run as ``python phalanx_env.py ENV PACKAGES STEPS``.

Shipped in the code bundle (standard library only, any Python 3.8+) and run by a pod's build-env
step on a volume every pod of the cluster mounts. The first pod to need environment ENV builds it
(``pip install --target``, then the build steps with ``PIP_TARGET`` pointing into it) in a temporary
folder and renames it into place; the others wait on the same file lock and reuse it, and so does
every restart. PACKAGES and STEPS are newline-separated.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys


def build(env: str, packages: list[str], steps: list[str], code: str) -> None:
    ready = os.path.join(env, ".ready")
    os.makedirs(os.path.dirname(env), exist_ok=True)
    with open(env + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first pod builds; the others wait, then reuse it
        if os.path.exists(ready):
            return
        tmp = env + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        site = os.path.join(tmp, "site")
        os.makedirs(site)
        if packages:
            pip = [sys.executable, "-m", "pip", "install", "--no-input", "--target", site]
            subprocess.run(pip + packages, check=True)
        path = os.path.join(site, "bin") + ":" + os.environ.get("PATH", "")
        step_env = dict(os.environ, PIP_TARGET=site, PYTHONPATH=site, PATH=path)
        for step in steps:
            subprocess.run(["/bin/sh", "-c", step], check=True, env=step_env, cwd=code)
        shutil.rmtree(env, ignore_errors=True)
        os.rename(tmp, env)
        open(ready, "w").close()


if __name__ == "__main__":
    env_dir, packages_arg, steps_arg = sys.argv[1], sys.argv[2], sys.argv[3]
    code_dir = sys.argv[4] if len(sys.argv) > 4 else os.getcwd()
    build(
        env_dir, [p for p in packages_arg.split("\n") if p], [s for s in steps_arg.split("\n") if s], code_dir
    )
    print("build-env: ready at " + env_dir)
