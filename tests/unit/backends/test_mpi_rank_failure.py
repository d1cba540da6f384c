"""Which rank ended an mpirun job, and why in its own words: what a failed MPI experiment's reason
quotes instead of Open MPI's "Primary job terminated normally, but 1 process returned..." lines.

The logs are what Open MPI 4 writes with ``--tag-output`` (captured from this machine's mpirun),
chunks of one rank's line split and interleaved with another's as mpirun reads them."""

from __future__ import annotations

from phalanx.backends.local.mpi_output import rank_failure

RANK_1_RAISES = """\
[1,1]<stdout>:hello from[1,1]<stdout>: [1,1]<stdout>:1[1,1]<stdout>:
[1,1]<stderr>:Traceback (most recent call last):
[1,1]<stderr>:  File "/tmp/train.py", line 5, in <module>
[1,1]<stderr>:    [1,1]<stderr>:import horovod[1,1]<stderr>:
[1,1]<stderr>:ModuleNotFoundError[1,1]<stderr>:: [1,1]<stderr>:No module named 'horovod'[1,1]<stderr>:
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
[1,0]<stdout>:hello from 0
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[8592,1],1]
  Exit code:    3
--------------------------------------------------------------------------
"""

RANK_0_KILLED = """\
[1,0]<stdout>:hello 0
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
[1,1]<stdout>:hello 1
--------------------------------------------------------------------------
mpirun noticed that process rank 0 with PID 0 on node vm exited on signal 9 (Killed).
--------------------------------------------------------------------------
"""


def test_the_rank_mpirun_names_is_the_culprit_and_its_reason_is_its_own_traceback() -> None:
    failure = rank_failure(RANK_1_RAISES.splitlines())
    assert failure is not None
    assert (failure.rank, failure.what) == (1, "exited with code 3")
    assert failure.last[-1] == "ModuleNotFoundError: No module named 'horovod'"  # rejoined whole
    assert "    import horovod" in failure.last
    reason = failure.reason()
    assert reason.startswith("(rank 1) exited with code 3; last lines of its log:\n")
    assert "Primary job" not in reason and "Process name" not in reason and "hello from 0" not in reason


def test_a_rank_killed_by_a_signal_is_named_with_the_signal() -> None:
    failure = rank_failure(RANK_0_KILLED.splitlines())
    assert failure is not None
    assert (failure.rank, failure.what, failure.last) == (0, "was killed by signal 9 (Killed)", ("hello 0",))


def test_without_mpiruns_summary_the_rank_that_printed_a_traceback_is_the_culprit() -> None:
    log = [
        "[1,0]<stdout>:step 1",
        "[1,1]<stderr>:Traceback (most recent call last):",
        "[1,1]<stderr>:ValueError: bad batch",
        "[1,0]<stdout>:step 2",
    ]
    failure = rank_failure(log)
    assert failure is not None
    assert (failure.rank, failure.what) == (1, "raised an exception")
    assert failure.last == ("Traceback (most recent call last):", "ValueError: bad batch")


def test_nothing_to_blame_gives_none_and_only_the_last_lines_are_kept() -> None:
    assert rank_failure(["[1,0]<stdout>:fine", "mpirun: something odd"]) is None
    many = [f"[1,1]<stdout>:line {i}" for i in range(50)] + ["  Process name: [[1,1],1]", "  Exit code: 2"]
    failure = rank_failure(many, keep=3)
    assert failure is not None and failure.last == ("line 47", "line 48", "line 49")
