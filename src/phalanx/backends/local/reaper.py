"""The leader of one local replica: starts its processes and makes sure none outlives it.

Forked from its supervisor (``fork``), or run as ``python -I -c ...reaper.main CONFIG.json``
(standard library only, fast to start) where a fork is not safe, for a boxed replica, and on other
engines' nodes. It asks the kernel for SIGTERM when its parent (``phalanx run``) dies
(PR_SET_PDEATHSIG, set here and checked against the expected parent pid to close the race), and
becomes a child subreaper (PR_SET_CHILD_SUBREAPER) so that every descendant, even one that
daemonises or calls setsid, stays below it and is killed with it. It starts the replica's k
processes (torchrun's nproc_per_node), copies their output line by line to the replica's log file,
enforces the memory limit when no cgroup can, and, like torchrun, stops the siblings when one
process fails. It then exits the way its first failing process did (same code, or the same signal),
after writing a status file with the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from phalanx.backends.logfiles import MAX_LINE, STDERR_MARK_BYTES
from phalanx.machine import cgroups, proctree
from phalanx.machine.forks import Forked, close_all, fork_apart, ready
from phalanx.machine.handoff import TRUSTED_PATH, handed

TYPE_CHECKING = False  # without importing typing (every replica's reaper pays for what it imports)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import IO, Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
WATCH_INTERVAL = 0.25  # seconds between two looks at the replica's memory
STATUS_RETRY_SECONDS = 10.0  # how long a full disk may delay the status file
# after the processes ended: a pipe that stays open with nothing in it this long, while we look, is
# held by a process outside the tree (the tree is gone); measured from the last data, not the start
DRAIN_STALL_SECONDS = 2.0


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:  # pragma: no cover - only on exotic kernels
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


class LogSink:
    """The replica's log file, written so that a full disk never takes the reaper (and with it the
    replica, whose output pipe would break) down: output that finds no room is dropped and counted,
    and a note saying how much was lost is written once there is room again."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lost = 0
        self.error: str | None = None  # the last write error while output is being lost

    def write(self, data: bytes) -> None:
        if self.lost:
            note = f"[phalanx: {self.lost} bytes of output were lost: {self.error}]\n".encode()
            if not self._write(note):
                self.lost += len(data)
                return
            self.lost, self.error = 0, None
        if not self._write(data):
            self.lost += len(data)

    def _write(self, data: bytes) -> bool:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            self.error = f"{exc.strerror or exc} ({exc.filename or 'the log file'})"
            return False
        return True

    def flush(self) -> None:
        return None

    def close(self) -> None:
        os.close(self.fd)


class Reaper:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.grace = float(config.get("grace", 5.0))
        self.stop_signal: int | None = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.buffers: dict[int, bytes] = {}
        self.failure: tuple[int | None, int | None, str | None] | None = None  # code, signal, reason
        self.memory_mib: float | None = config.get("memory_mib")
        self.cgroup: Path | None = None
        self.failed_at: float | None = None  # when the first failure was seen (orders replicas)
        self.disk_error: str | None = None  # output was lost to a full disk
        self.memory = proctree.MemoryWatch()  # the watchdog's view: PSS plus held /dev/shm files
        # a boxed unit (a server's submission): its box argv, what it inherits by name, its account's
        # uid and its cgroup, which holds its memory limit (no watchdog) and every process of it
        self.box: dict[str, Any] | None = config.get("box")
        folders = tuple((self.box or {}).get("cgroup") or ())
        self.box_cgroup = cgroups.Cgroup(folders, bool(self.box and self.box.get("v2"))) if folders else None

    # -- signals --------------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum

    def parent_gone(self) -> bool:
        """Whether the engine that started us is no longer our parent (it died)."""
        parent = self.config.get("parent")
        return bool(parent) and os.getppid() != parent

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if self.parent_gone():
            self.stop_signal = signal.SIGTERM  # the parent died before the death signal was armed
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        cpus = self.config.get("cpus")
        if cpus:
            os.sched_setaffinity(0, cpus)  # inherited by every process the replica starts
        if self.memory_mib and self.config.get("cgroup"):
            self._join_cgroup(Path(self.config["cgroup"]), int(self.memory_mib * proctree.MIB))

    def _join_cgroup(self, path: Path, max_bytes: int) -> None:
        try:
            path.mkdir(exist_ok=True)
            (path / "memory.max").write_text(str(max_bytes))
            (path / "memory.swap.max").write_text("0") if (path / "memory.swap.max").exists() else None
            (path / "cgroup.procs").write_text(str(os.getpid()))
            self.cgroup = path
        except OSError:
            self.cgroup = None  # fall back to the watchdog

    # -- processes ------------------------------------------------------------------------------
    def start(self, log: LogSink, sel: selectors.BaseSelector) -> None:
        for local_rank, spec in enumerate(self.config["processes"]):
            argv, env = spec["argv"], {**os.environ, **spec["env"]}  # the file holds what Phalanx adds
            held: IO[bytes] | None = None
            if self.box is not None:  # nothing inherited but the locale and the secrets, by name
                inherited = {k: os.environ[k] for k in self.box["inherit"] if k in os.environ}
                env = {**inherited, **self.box.get("given", {}), **spec["env"]}
                # none of it reaches bubblewrap or setpriv, which run as root: the account's shell
                # exports it (phalanx.machine.handoff)
                uid = int(self.box["uid"])
                program, held = handed(argv, env, uid, int(self.box.get("gid", uid)))
                argv, env = [*self.box["argv"], *program], {"PATH": TRUSTED_PATH}
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=spec["cwd"],
                    env=env,
                    stdin=held if held is not None else subprocess.DEVNULL,  # its environment, read first
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,  # kept apart: its lines are marked stderr in the log
                    preexec_fn=self.box_cgroup.join if self.box_cgroup else None,
                )
            finally:
                if held is not None:
                    held.close()
            self.procs.append(proc)
            for pipe, is_err in ((proc.stdout, False), (proc.stderr, True)):
                assert pipe is not None
                os.set_blocking(pipe.fileno(), False)
                self.buffers[pipe.fileno()] = b""
                sel.register(pipe, selectors.EVENT_READ, (local_rank, is_err))

    def _prefix(self, source: tuple[int, bool]) -> bytes:
        """What goes before each line of a process' pipe: the stderr mark, then its local rank."""
        local_rank, is_err = source
        rank = f"[{local_rank}] ".encode() if len(self.config["processes"]) > 1 else b""
        return (STDERR_MARK_BYTES if is_err else b"") + rank

    def pump(self, sel: selectors.BaseSelector, log: LogSink, timeout: float) -> int:
        """Copy what the pipes hold now (waiting up to ``timeout`` for some) to the log; returns
        how many pipes had data or reached their end."""
        ready = sel.select(timeout)
        for key, _ in ready:
            fd = key.fd
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            data = self.buffers[fd] + chunk
            if not chunk:
                sel.unregister(key.fileobj)
                if data:
                    log.write(self._prefix(key.data) + data + b"\n")
                self.buffers[fd] = b""
                continue
            lines = data.split(b"\n")
            self.buffers[fd] = lines.pop()
            if len(self.buffers[fd]) > MAX_LINE:  # a line without end (progress bars): cut it
                lines.append(self.buffers[fd])
                self.buffers[fd] = b""
            if lines:
                prefix = self._prefix(key.data)
                log.write(b"".join(prefix + line + b"\n" for line in lines))
        log.flush()
        return len(ready)

    def drain(
        self, sel: selectors.BaseSelector, log: LogSink, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Once the processes ended: what they left in the pipes, to each pipe's end. No fixed bound
        (a loaded machine may not run us for seconds, and a replica's last lines must still reach
        its log): only pipes that stayed open and empty for DRAIN_STALL_SECONDS of looking are left."""
        quiet_since = clock()
        while sel.get_map():
            if self.pump(sel, log, 0.05):
                quiet_since = clock()
            elif clock() - quiet_since > DRAIN_STALL_SECONDS:
                return

    def tree(self) -> list[int]:
        return proctree.descendants(os.getpid())

    def signal_tree(self, sig: int) -> int:
        pids = self.tree()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return len(pids)

    def reap_orphans(self) -> None:
        """Collect exited orphans that were reparented to us, leaving our own children to Popen.

        Only its Popen may wait for a replica process: reaped here, its status would be lost and
        Popen would then report 0 (ECHILD) for a process that was killed, a failed replica
        recorded as succeeded. One whose Popen cannot collect it yet is left for the next look."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            own = next((p for p in self.procs if p.pid == info.si_pid and p.returncode is None), None)
            if own is not None:
                if own.poll() is None:
                    return  # not collected now: never by us; the next look tries again
                continue
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, 0)

    def signal_box(self, sig: int) -> int:
        """A boxed unit: ``sig`` to the box's own processes only (its account's). bubblewrap's two
        processes (root's) would end the namespace at once, with SIGKILL for all in it, and a
        replica that saves its work on SIGTERM must get its grace period."""
        assert self.box is not None
        owned = [p for p in self.tree() if _uid(p) == self.box["uid"]]
        for pid in owned:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return len(owned)

    def terminate_all(self, sel: selectors.BaseSelector, log: LogSink, grace: float) -> None:
        """SIGTERM to every descendant, SIGKILL to what is left after the grace period."""
        gentle = self.signal_tree if self.box is None else self.signal_box
        gentle(signal.SIGTERM)
        gentle(signal.SIGCONT)  # a stopped (SIGSTOP) process gets the SIGTERM only once it runs
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self.pump(sel, log, 0.05)
            self.reap_orphans()
            if not self.tree():
                return
        if self.box_cgroup is not None:
            self.box_cgroup.kill()
        while self.signal_tree(signal.SIGKILL):
            self.pump(sel, log, 0.05)
            self.reap_orphans()

    def check_memory(self) -> bool:
        if self.box_cgroup is not None:  # the kernel holds a box to its limit
            return self.box_cgroup.oom_killed()
        if not self.memory_mib:
            return False
        if self.cgroup is not None:
            try:
                events = (self.cgroup / "memory.events").read_text().split()
                return int(events[events.index("oom_kill") + 1]) > 0
            except (OSError, ValueError, IndexError):
                return False
        # each page once: PSS across the tree (a forked DataLoader's shared pages are not counted
        # per worker) plus the /dev/shm files the tree holds without mapping them
        return self.memory.usage(self.tree()).total > self.memory_mib * proctree.MIB

    def failure_of(self, code: int) -> tuple[int | None, int | None, str | None]:
        """A process's nonzero exit: the memory limit when the kernel (or the watch) killed it for
        that, even when its exit is seen before the next watch (a shell reports its child's SIGKILL
        as 137), else its code or signal."""
        if self.memory_mib and self.check_memory():
            return (None, signal.SIGKILL, proctree.memory_exceeded_reason(self.memory_mib))
        return (code, None, None) if code > 0 else (None, -code, None)

    def run(self) -> int:
        sel = selectors.DefaultSelector()
        log_path = Path(self.config["log"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = LogSink(log_path)
        try:
            if self.stop_signal is None:
                self.start(log, sel)
            next_watch = 0.0
            while True:
                self.pump(sel, log, 0.1)
                self.reap_orphans()
                if self.stop_signal is not None:
                    self.terminate_all(sel, log, self.grace)
                    self.failure = self.failure or (None, self.stop_signal, "stopped")
                    break
                now = time.monotonic()
                if now >= next_watch:
                    next_watch = now + WATCH_INTERVAL
                    if self.check_memory():
                        assert self.memory_mib is not None
                        reason = proctree.memory_exceeded_reason(self.memory_mib)
                        self.failure = (None, signal.SIGKILL, reason)
                        self.failed_at = time.time()
                        while self.signal_tree(signal.SIGKILL):
                            self.pump(sel, log, 0.05)
                            self.reap_orphans()
                        break
                # one look at every process, for both questions: a process that exits between two
                # looks would otherwise end the unit as if all had succeeded (its code never read)
                codes = [p.poll() for p in self.procs]
                failed = next((code for code in codes if code not in (None, 0)), None)
                if failed is not None and self.failure is None:
                    self.failure = self.failure_of(failed)
                    self.failed_at = time.time()
                if self.failure is not None or None not in codes:
                    # a failed process takes its siblings down; a finished replica leaves nothing behind
                    self.terminate_all(sel, log, self.grace if self.failure else min(self.grace, 2.0))
                    break
            for p in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
            self.drain(sel, log)
        finally:
            log.close()
        self.disk_error = log.error if log.lost else None
        self._write_status()
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                self.cgroup.rmdir()
        if self.box_cgroup is not None:
            self.box_cgroup.kill()  # nothing of the box outlives its unit
            self.box_cgroup.remove()
        return self._exit()

    def _write_status(self) -> None:
        code, sig, reason = self.failure or (0, None, None)
        status = {
            "exit_code": code,
            "signal": sig,
            "reason": reason,
            "returncodes": [p.returncode for p in self.procs],
            "failed_at": self.failed_at,
        }
        if self.disk_error:
            status["disk_error"] = self.disk_error
        path = Path(self.config["status"])
        tmp = path.with_suffix(".tmp")
        deadline = time.monotonic() + STATUS_RETRY_SECONDS
        while True:  # a full disk: the engine must still learn how the replica ended
            try:
                tmp.write_text(json.dumps(status))
                tmp.replace(path)
                return
            except OSError:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                if time.monotonic() > deadline:
                    return  # the engine falls back to our exit status and names the full disk
                time.sleep(0.2)

    def _exit(self) -> int:
        code, sig, _ = self.failure or (0, None, None)
        if sig is not None:
            # die of the same signal, so the engine's waitpid reads what happened to the replica
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            os.kill(os.getpid(), sig)
            time.sleep(1)
        return int(code or 0)


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[0]).read_text())
    if config.get("box") is not None:  # the project's secrets: on standard input, never in our env
        config["box"]["given"] = json.loads(sys.stdin.buffer.read() or b"{}")
    reaper = Reaper(config)
    reaper.install()
    if reaper.parent_gone():
        # the engine died while we were starting (a SIGKILLed `phalanx run`): nothing was started
        # and nobody will read a status, so write nothing; a log folder made now could re-create
        # the run folder the next reader removed as an aborted start
        return 128 + signal.SIGTERM
    return reaper.run()


def fork(config: Path, env: Mapping[str, str], cwd: str, stdin: int, stderr: int, title: str) -> Forked:
    """The reaper of ``config`` forked from this process (its supervisor, single-threaded:
    ``forks.can_fork``) rather than started as `python -I -c ...main CONFIG`: the same reaper,
    without an interpreter's start-up and imports for every replica (issue 42). Like the started
    one it leads its own session, titled ``title`` in `ps`, in the folder ``cwd`` (a missing one
    fails here, as Popen's ``cwd`` does), with ``env`` as its whole environment, ``stdin`` and
    ``stderr`` as its own, its output nowhere, and none of the supervisor's other fds (its store,
    its locks, its pipes)."""
    folder = os.open(cwd, os.O_PATH | os.O_DIRECTORY)  # O_PATH: a folder it may enter, not list, too
    quiet = os.open(os.devnull, os.O_WRONLY)
    try:
        pid, held = fork_apart(title, stdin, quiet, stderr)
    except BaseException:
        os.close(folder)
        os.close(quiet)
        raise
    if pid:
        os.close(folder)
        os.close(quiet)
        return Forked(pid)
    code = 1
    try:  # the child: never returns into the supervisor's code
        os.fchdir(folder)
        close_all()
        os.environ.clear()
        os.environ.update(env)
        ready(held)
        code = main([str(config)])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        with contextlib.suppress(Exception):
            sys.excepthook(*sys.exc_info())  # the interpreter's own print, no import
    finally:
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
