"""The box a server runs submitted code in (phalanx.machine.box): what its bubblewrap argv mounts,
in which order, as whom it drops to, what environment it starts from, and how root touches the
folders a box writes (never through a link the box planted)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from phalanx.machine import box, box_accounts
from phalanx.machine.box import Isolation, Layout

ISO = Isolation("phx-nlp", 61000, 61001, "nlp", "http://127.0.0.1:8000", hidden=("/etc/phalanx",))
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another account needs root")


@pytest.fixture(autouse=True)
def account_files(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The box's copies of /etc/passwd... in a folder of the test's, not the machine's /run."""
    monkeypatch.setattr(box_accounts, "FOLDER", tmp_path_factory.mktemp("run") / "phalanx-box")


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_the_box_sees_the_machine_read_only_its_own_folders_and_drops_to_its_account(tmp_path: Path) -> None:
    work, own, venv = tmp_path / "work", tmp_path / "own", tmp_path / "venv"
    for folder in (work, own, venv):
        folder.mkdir()
    argv = box.box_argv(
        ISO, Layout(cwd=str(work), tmp=str(own / "tmp"), rw=(str(work), str(own)), ro=(str(venv),))
    )
    command = argv[argv.index("--") + 1 :]
    assert command[1:] == [
        "--reuid=61000",
        "--regid=61001",
        "--clear-groups",
        "--no-new-privs",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--",
    ]
    assert {"--die-with-parent", "--unshare-pid", "--unshare-ipc", "--new-session"} <= set(argv)
    assert ("/usr", "/usr") in pairs(argv, "--ro-bind") and ("/etc", "/etc") in pairs(argv, "--ro-bind")
    assert (str(venv), str(venv)) in pairs(argv, "--ro-bind")
    assert {(str(work), str(work)), (str(own), str(own))} <= set(pairs(argv, "--bind"))
    assert (str(own / "tmp"), "/tmp") in pairs(argv, "--bind")
    # /tmp before what is bound below it (here: all of tmp_path), then /proc and /dev of its own
    assert argv.index(str(own / "tmp")) < argv.index(str(work))
    assert argv[argv.index("--proc") + 1] == "/proc" and argv[argv.index("--dev") + 1] == "/dev"
    assert argv[argv.index("--chdir") + 1] == str(work)


def test_folders_above_a_bound_path_are_made_0755_not_bubblewraps_0700(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    argv = box.box_argv(ISO, Layout(cwd=str(deep), tmp=None, ro=(str(deep),)))
    made = [argv[i + 3] for i, a in enumerate(argv) if a == "--perms" and argv[i + 1] == "0755"]
    assert str(tmp_path / "a") in made and str(tmp_path) in made
    assert argv.index(str(tmp_path / "a")) < argv.index("--ro-bind", argv.index(str(tmp_path / "a")))
    assert argv[argv.index("--tmpfs") : argv.index("--tmpfs") + 2] == ["--tmpfs", "/tmp"]


def test_a_missing_read_only_path_is_left_out_a_read_write_one_never(tmp_path: Path) -> None:
    later = tmp_path / "made-at-submit"
    argv = box.box_argv(ISO, Layout(cwd="/", tmp=None, rw=(str(later),), ro=(str(tmp_path / "gone"),)))
    assert (str(later), str(later)) in pairs(argv, "--bind")
    assert str(tmp_path / "gone") not in argv


def test_a_path_reached_through_a_link_is_bound_where_it_is_and_where_it_is_named(tmp_path: Path) -> None:
    real = tmp_path / ".build-abc"
    real.mkdir()
    (tmp_path / "abc").symlink_to(real.name)
    argv = box.box_argv(ISO, Layout(cwd="/", tmp=None, ro=(str(tmp_path / "abc"),)))
    assert {(str(real), str(real)), (str(real), str(tmp_path / "abc"))} <= set(pairs(argv, "--ro-bind"))


def test_server_paths_under_a_machine_tree_are_masked(tmp_path: Path) -> None:
    iso = Isolation("phx-x", 61000, 61000, "x", "http://h", hidden=("/etc/passwd", "/usr/lib", str(tmp_path)))
    argv = box.box_argv(iso, Layout(cwd="/", tmp=None))
    assert ("/dev/null", "/etc/passwd") in pairs(argv, "--ro-bind")
    assert argv[argv.index("--tmpfs") + 1] == "/usr/lib"
    assert str(tmp_path) not in argv  # not under a machine tree: not in the box at all


def test_a_box_without_network_has_a_network_namespace_of_its_own_a_jobs_shares_the_machines() -> None:
    offline = box.box_argv(ISO, Layout(cwd="/", tmp=None, network=False))
    assert "--unshare-net" in offline[: offline.index("--ro-bind")]  # bubblewrap's, not the program's
    assert "--unshare-net" not in box.box_argv(ISO, Layout(cwd="/", tmp=None))  # replicas report over HTTP


def test_gpus_are_their_device_nodes_and_the_control_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("PHALANX_GPU_DEVICES_DIR", str(tmp_path))
    assert box.gpu_nodes(["1"]) == tuple(str(tmp_path / n) for n in ("nvidia1", "nvidiactl", "nvidia-uvm"))
    assert box.gpu_nodes([]) == ()
    assert {str(tmp_path / "nvidia0"), str(tmp_path / "nvidia1")} <= set(box.gpu_nodes(["GPU-4f2a"]))
    argv = box.box_argv(ISO, Layout(cwd="/", tmp=None, devices=box.gpu_nodes(["1"])))
    assert (str(tmp_path / "nvidia1"), "/dev/nvidia1") in pairs(argv, "--dev-bind")
    assert argv.index("--dev-bind") > argv.index("--dev")  # on top of its own /dev


def test_the_box_environment_is_its_own_and_takes_only_named_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "server's")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("NLP_KEY", "the project's")
    env = box.box_env(ISO, "/own/home", ["/venv/bin"])
    assert env["PATH"].startswith("/venv/bin:") and env["HOME"] == "/own/home" and env["USER"] == "phx-nlp"
    taken = box.inherited(["NLP_KEY", "ABSENT"])
    assert taken == {"LANG": "C.UTF-8", "NLP_KEY": "the project's"}


def test_an_isolation_survives_a_json_round_trip() -> None:
    assert Isolation.from_json(ISO.to_json()) == ISO
    assert box.isolation_of({"isolation": ISO.to_json()}) == ISO
    assert box.isolation_of({"isolation": None}) is None and box.isolation_of(None) is None


def test_read_inside_refuses_a_link_anywhere_on_the_way(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("root's")
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "req.txt").write_text("numpy\n")
    assert box.read_inside(work, "sub/req.txt", 100) == b"numpy\n"
    (work / "link.txt").symlink_to(tmp_path / "secret")
    (work / "hop").symlink_to(tmp_path)
    for planted in ("link.txt", "hop/secret"):
        with pytest.raises(OSError):
            box.read_inside(work, planted, 100)
    os.mkfifo(work / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        box.read_inside(work, "fifo", 100)
    with pytest.raises(OSError):
        box.read_inside(work, "../secret", 100)


def test_a_file_larger_than_asked_is_not_read_a_sparse_one_included(tmp_path: Path) -> None:
    """A job's 8 GiB sparse state file costs it nothing on disk: root must not read it whole."""
    with open(tmp_path / "state", "wb") as f:
        f.truncate(8 << 30)
    with pytest.raises(OSError, match="larger than 1,024 bytes"):
        box.read_inside(tmp_path, "state", 1024)
    with pytest.raises(OSError, match="larger than 1,024 bytes"):
        box.read_file(tmp_path / "state", 1024)
    (tmp_path / "small").write_bytes(b"x" * 1024)
    assert box.read_file(tmp_path / "small", 1024) == b"x" * 1024


@root_only
def test_hand_over_gives_the_folder_to_the_box_without_following_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("root's file")
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "train.py").write_text("print(1)")
    (work / "escape").symlink_to(outside)
    (work / "pkg" / "twin").hardlink_to(outside)  # a second name of a file elsewhere
    changed = box.hand_over(work, ISO)
    assert changed == 4  # work, pkg, train.py, the link itself
    for path in (work, work / "pkg", work / "pkg" / "train.py"):
        assert (path.stat().st_uid, path.stat().st_gid) == (ISO.uid, ISO.gid)
    assert os.lstat(work / "escape").st_uid == ISO.uid
    assert outside.stat().st_uid == 0  # neither through the link nor through the hard link


@root_only
def test_a_boxs_own_folder_is_made_fresh_never_through_a_planted_link(tmp_path: Path) -> None:
    made = box.make_own_folder(tmp_path / "own", ISO)
    info = made.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (ISO.uid, 0o700)
    (tmp_path / "planted").symlink_to("/etc")
    with pytest.raises(OSError, match="not a folder"):
        box.make_own_folder(tmp_path / "planted", ISO)
    assert Path("/etc").stat().st_uid == 0


PASSWD = """root:x:0:0:root:/root:/bin/bash
postgres:x:105:110:PostgreSQL administrator:/var/lib/postgresql:/bin/bash
phx-vision:x:995:994:phalanx box for project vision:/home/phx-vision:/usr/sbin/nologin
phx-nlp:x:994:993:phalanx box for project nlp:/home/phx-nlp:/usr/sbin/nologin
renamed:x:993:992:phalanx box for project Odd.Name:/home/renamed:/usr/sbin/nologin
alice:x:1000:1000:Alice:/home/alice:/bin/bash
"""
GROUP = """root:x:0:
video:x:44:alice,phx-vision,phx-nlp
phx-vision:x:994:
phx-nlp:x:993:
renamed:x:992:
alice:x:1000:
"""
SHADOW = "root:*:19000::::::\nphx-vision:!:19000::::::\nphx-nlp:!:19000::::::\n"
GSHADOW = "video:!:phx-vision:alice,phx-vision,phx-nlp\nphx-vision:!::\nphx-nlp:!::\n"


def test_a_box_sees_the_machines_accounts_but_no_other_projects() -> None:
    files = {
        box_accounts.PASSWD: PASSWD,
        box_accounts.GROUP: GROUP,
        box_accounts.SHADOW: SHADOW,
        box_accounts.GSHADOW: GSHADOW,
    }
    seen = box_accounts.views(files, "phx-nlp", 994, 993)
    assert [line.split(":")[0] for line in seen[box_accounts.PASSWD].splitlines()] == [
        "root",
        "postgres",
        "phx-nlp",
        "alice",
    ]
    assert seen[box_accounts.GROUP].splitlines() == [
        "root:x:0:",
        "video:x:44:alice,phx-nlp",
        "phx-nlp:x:993:",
        "alice:x:1000:",
    ]
    assert seen[box_accounts.SHADOW] == "root:*:19000::::::\nphx-nlp:!:19000::::::\n"
    assert seen[box_accounts.GSHADOW] == "video:!::alice,phx-nlp\nphx-nlp:!::\n"
    # a uid range's account has no entry on the machine: the box gets one (whoami, pip, git)
    ranged = box_accounts.views(files, "phx-200001", 200001, 200001)
    assert ranged[box_accounts.PASSWD].endswith(
        "phx-200001:x:200001:200001:phalanx box:/nonexistent:/usr/sbin/nologin\n"
    )
    assert ranged[box_accounts.GROUP].endswith("alice:x:1000:\nphx-200001:x:200001:\n")
    assert "phx-" not in ranged[box_accounts.PASSWD].replace("phx-200001", "")
    assert box_accounts.views({}, "phx-nlp", 994, 993) == {}


def test_the_box_binds_its_account_files_over_the_machines_and_hides_every_cgroup() -> None:
    argv = box.box_argv(ISO, Layout(cwd="/", tmp=None))
    bound = dict((target, source) for source, target in pairs(argv, "--ro-bind"))
    if os.access("/etc/passwd", os.R_OK):
        copy = Path(bound["/etc/passwd"])
        assert copy != Path("/etc/passwd") and "phx-nlp:x:61000:61001:" in copy.read_text()
        assert argv.index("/etc/passwd") > argv.index("/etc")  # on top of the machine's /etc
    for backup in box_accounts.BACKUPS:
        if os.path.lexists(backup):
            assert bound[backup] == "/dev/null"
    if os.path.isdir("/sys/fs/cgroup"):
        assert argv[argv.index("--tmpfs", argv.index("/sys")) + 1] == "/sys/fs/cgroup"


def test_a_box_is_shown_its_own_cgroup_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cgroup"
    own = [root / "memory" / "server" / "phalanx" / "e1.0.master", root / "pids" / "phalanx" / "e1.0.master"]
    for folder in own:
        folder.mkdir(parents=True)
    monkeypatch.setattr(box, "CGROUPS", str(root))
    argv = box.box_argv(ISO, Layout(cwd="/", tmp=None))
    shown = box.with_cgroup([*argv, "python", "--chdir"], [*map(str, own), "/elsewhere", str(root / "gone")])
    assert (
        shown[-2:] == ["python", "--chdir"]
        and shown[: argv.index("--chdir")] == argv[: argv.index("--chdir")]
    )
    added = shown[argv.index("--chdir") : shown.index("--chdir")]
    assert [p for p in pairs(added, "--ro-bind")] == [(str(f), str(f)) for f in own]
    made = [added[i + 3] for i, a in enumerate(added) if a == "--perms" and added[i + 1] == "0755"]
    assert made == [
        str(root / "memory"),
        str(root / "memory" / "server"),
        str(root / "memory" / "server" / "phalanx"),
        str(root / "pids"),
        str(root / "pids" / "phalanx"),
    ]
    assert box.with_cgroup(argv, []) == argv
