"""The standard-library-only copy of the tracking SDK that replicas import in a foreign venv.

Below the engines and the supervisor alike: the supervisor puts it on a local replica's PYTHONPATH
and the Kubernetes engines ship it in their code bundle, so neither asks the other for it.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from phalanx import tracking
from phalanx._version import __version__

# The modules outside phalanx/tracking that the SDK imports (all standard-library only); a test imports
# every module of the copy with a bare interpreter, so a missing one fails there, not in a user's venv.
SDK_TOP_MODULES = (
    "__init__.py",
    "_version.py",
    "machine/__init__.py",
    "errors.py",
    "ids.py",  # a plain script's own experiment id (tracking.task)
    "machine/procs.py",
    "spool.py",
    "checkpoints.py",
    # `python -m phalanx.machine.sysmetrics` beside a replica on a cluster node (the Slurm task runner)
    "machine/sysmetrics.py",
    "machine/proctree.py",
    "machine/record.py",  # proctree's and cgroups' records
    "machine/limits.py",
    "machine/ledger.py",  # limits counts cores as the ledger does (and its doorbell, share's rules)
    "machine/doorbell.py",
    "share.py",
    "machine/cgroups.py",  # the reaper kills a boxed replica through its cgroup
    "domain.py",
    "knobs.py",
    # the local engine's reaper, which leads a replica's process group on a Ray node (ray_actor)
    "backends/__init__.py",
    "backends/logfiles.py",
    "backends/local/__init__.py",
    "backends/local/reaper.py",
    "machine/handoff.py",  # the reaper hands a boxed replica its environment
    "machine/forks.py",  # the reaper forked from a local supervisor (imported wherever it runs)
)


def sdk_path(home: Path) -> Path:
    """A standard-library-only copy of the tracking SDK under ``home``/sdk/<version>-<hash> (a
    Phalanx home, or a cluster's shared folder), so
    `from phalanx import Task` works inside a foreign venv (TensorFlow's, MXNet's)."""
    pkg = Path(__file__).parent  # the phalanx package: this module is phalanx/sdkcopy.py
    files = [*(pkg / name for name in SDK_TOP_MODULES), *sorted(Path(tracking.__file__).parent.rglob("*.py"))]
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(pkg)).encode())
        digest.update(f.read_bytes())
    target = home / "sdk" / f"{__version__}-{digest.hexdigest()[:12]}"
    if (target / "phalanx" / "__init__.py").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".sdk-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would keep it from a box's account (and a cluster job's user)
    for f in files:
        dest = tmp / "phalanx" / f.relative_to(pkg)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dest)
    try:
        tmp.rename(target)
    except OSError:  # another supervisor published the same copy first
        shutil.rmtree(tmp, ignore_errors=True)
    return target
