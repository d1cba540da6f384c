"""What Phalanx reads of a build's requirements file (to know which packages the user named): on
a server root reads it, so only a regular file (or a link to one) of at most a MiB."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phalanx.buildenv import env_hash
from phalanx.errors import UsageError
from phalanx.frameworks.packages import framework_packages, requirement_lines
from phalanx.spec.model import REQUIREMENTS_MAX_BYTES, Build


def test_the_lines_of_a_requirements_file_without_comments(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.13.0  # the pin\n\nnumpy\n")
    assert requirement_lines(str(req)) == ["torch==2.13.0", "numpy"]
    assert requirement_lines(str(tmp_path / "missing.txt")) == []


def test_a_device_a_fifo_or_a_folder_is_not_read_a_link_to_a_file_is(tmp_path: Path) -> None:
    assert requirement_lines("/dev/zero") == []  # a character device: never read (it never ends)
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    assert requirement_lines(str(tmp_path / "zero.txt")) == []
    os.mkfifo(tmp_path / "fifo.txt")  # no writer: reading would wait for ever
    assert requirement_lines(str(tmp_path / "fifo.txt")) == []
    assert requirement_lines(str(tmp_path)) == []  # a folder
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "prod.txt").write_text("torch==2.13.0\n")
    (tmp_path / "requirements.txt").symlink_to("requirements/prod.txt")
    assert requirement_lines(str(tmp_path / "requirements.txt")) == ["torch==2.13.0"]


def test_a_file_over_a_mebibyte_is_not_read_and_the_build_says_why(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("numpy\n" + "#" * REQUIREMENTS_MAX_BYTES + "\nonnx\n")
    assert requirement_lines(str(req)) == []
    assert "onnx" not in framework_packages(None, (), str(req))
    with pytest.raises(UsageError, match="larger than 1,048,576 bytes"):
        env_hash(Build(requirements="requirements.txt"), tmp_path)


def test_the_build_refuses_a_device_it_is_pointed_at(tmp_path: Path) -> None:
    """A group checked on a server before it is recorded reads its trial's requirements as root."""
    (tmp_path / "requirements.txt").symlink_to("/dev/zero")
    with pytest.raises(UsageError, match="not a regular file"):
        env_hash(Build(requirements="requirements.txt"), tmp_path)
