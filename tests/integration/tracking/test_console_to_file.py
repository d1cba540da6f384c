"""A plain script's console is read by its detached ingester, which copies it to the terminal. A
script whose stdout is a file (`python train.py > out.log; tail out.log`) must not exit before its
last lines are in that file: a reader of the file right after the exit saw none of them."""

from __future__ import annotations

import subprocess
import sys
import termios
from pathlib import Path

from tests.support.sandbox import Sandbox

SCRIPT = """
from phalanx import Task
Task.init("qa", "tofile")
for i in range(3000):
    print("line", i)
print("LAST")
"""


def test_every_line_is_in_the_redirected_file_when_the_script_exits(sandbox: Sandbox) -> None:
    path = sandbox.script(SCRIPT)
    out = sandbox.home.parent / "out.log"
    for _ in range(3):
        with open(out, "w") as f:
            done = subprocess.run(
                [sys.executable, str(path)], env=sandbox.env, stdout=f, stderr=subprocess.STDOUT,
                cwd=sandbox.home.parent, timeout=120,
            )  # fmt: skip
        assert done.returncode == 0
        lines = out.read_text().splitlines()  # read at once, as `; tail out.log` does
        assert len(lines) == 3001 and lines[-1] == "LAST", lines[-3:]


def test_the_script_waits_for_a_chunk_the_relay_has_read_but_not_yet_written(tmp_path: Path) -> None:
    """The window the relay lock closes: the pipe is already empty, but the last chunk is still in
    the relay's hands (its terminal is slow: a full pipe to `less`, a slow disk). Waiting a fixed
    moment and hoping returned here before the chunk was written."""
    import fcntl
    import os
    import threading
    import time

    from phalanx.tracking.console import ExternalCapture, relay, relay_lock_path

    lock = relay_lock_path(tmp_path, os.getpid())
    capture = ExternalCapture(lock)
    out_r, _err_r, saved_out, saved_err = capture.reader_fds()
    for fd in (saved_out, saved_err):
        os.close(fd)
    term_r, term_w = os.pipe()
    size = fcntl.fcntl(term_w, fcntl.F_GETPIPE_SZ)
    os.write(term_w, b"x" * size)  # the terminal is full: the relay's write of LAST blocks
    reader = threading.Thread(target=relay, args=(out_r, term_w, "stdout", lambda *_: None, lock))
    reader.start()
    os.write(capture._out_w, b"LAST\n")
    buf = bytearray(4)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the relay took LAST from the pipe (and holds it)
        fcntl.ioctl(out_r, termios.FIONREAD, buf)
        if not int.from_bytes(buf, sys.byteorder):
            break
        time.sleep(0.01)
    returned: list[float] = []
    waiter = threading.Thread(
        target=lambda: (capture.wait_relayed(lambda: True, stall=20), returned.append(time.monotonic()))
    )
    waiter.start()
    time.sleep(0.3)  # (only to give a wrong wait_relayed the chance to return early)
    drained_at = time.monotonic()
    got = b""
    while not got.endswith(b"LAST\n"):
        got += os.read(term_r, 1 << 20)
    waiter.join(timeout=30)
    assert returned and returned[0] >= drained_at, "wait_relayed returned while LAST was not written"
    for fd in (capture._out_w, capture._err_w):
        os.close(fd)  # the script's end: the relay sees EOF
    reader.join(timeout=30)
    assert not reader.is_alive()
    os.close(_err_r)  # (the relay closed out_r)
    os.close(term_r)


def test_the_script_waits_for_a_reader_that_starts_late_and_not_for_one_that_died(tmp_path: Path) -> None:
    """On a loaded machine the detached reader may still be importing when a short script ends: a
    fixed 2-second wait returned with every line still in the pipe, and the redirected file was
    empty (CI, two CPU hogs beside it). A reader that died is not waited for."""
    import os
    import threading

    from phalanx.tracking.console import ExternalCapture, relay, relay_lock_path

    lock = relay_lock_path(tmp_path, os.getpid())
    capture = ExternalCapture(lock)
    out_r, err_r, saved_out, saved_err = capture.reader_fds()
    os.close(saved_err)
    os.write(capture._out_w, b"LAST\n")
    returned: list[float] = []
    waiter = threading.Thread(target=lambda: (capture.wait_relayed(lambda: True), returned.append(1)))
    waiter.start()
    waiter.join(timeout=3)  # longer than the old fixed wait
    assert not returned, "wait_relayed returned before any reader had read the last line"
    term_r, term_w = os.pipe()
    reader = threading.Thread(target=relay, args=(out_r, term_w, "stdout", lambda *_: None, lock))
    reader.start()
    waiter.join(timeout=30)
    assert returned and os.read(term_r, 100) == b"LAST\n"
    dead = ExternalCapture(relay_lock_path(tmp_path, os.getpid() + 1))
    os.write(dead._out_w, b"never read\n")
    dead.wait_relayed(lambda: False)  # returns at once: nobody is left to wait for
    for fd in (capture._out_w, capture._err_w):
        os.close(fd)
    reader.join(timeout=30)
    dead.abandon()
    for fd in (err_r, saved_out, term_r):
        os.close(fd)
