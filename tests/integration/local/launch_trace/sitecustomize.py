"""Loaded by every Python process started with this folder on PYTHONPATH: when LAUNCH_TRACE names a
file, append "pid ppid argv" to it (tests/integration/local/test_one_launch_path.py counts the
processes a launch starts, including those that ended before anyone could look at /proc)."""

import json
import os
import sys

_trace = os.environ.get("LAUNCH_TRACE")
if _trace:
    with open(_trace, "a") as _out:  # one short write per process: lines never interleave
        _out.write(json.dumps([os.getpid(), os.getppid(), sys.orig_argv]) + "\n")
