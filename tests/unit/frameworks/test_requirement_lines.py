"""What Phalanx reads of a build's requirements file (to know which packages the user named): on
a server root reads it, so only a regular file, never through a link, and at most its first MiB."""

from __future__ import annotations

from pathlib import Path

from phalanx.frameworks.packages import REQUIREMENTS_MAX_BYTES, framework_packages, requirement_lines


def test_the_lines_of_a_requirements_file_without_comments(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.13.0  # the pin\n\nnumpy\n")
    assert requirement_lines(str(req)) == ["torch==2.13.0", "numpy"]
    assert requirement_lines(str(tmp_path / "missing.txt")) == []


def test_a_device_or_a_link_is_not_read(tmp_path: Path) -> None:
    assert requirement_lines("/dev/zero") == []  # a character device: never read (it never ends)
    target = tmp_path / "elsewhere.txt"
    target.write_text("secret-package\n")
    (tmp_path / "requirements.txt").symlink_to(target)
    assert requirement_lines(str(tmp_path / "requirements.txt")) == []
    assert requirement_lines(str(tmp_path)) == []  # a folder


def test_only_the_first_mebibyte_is_read(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("numpy\n" + "#" * REQUIREMENTS_MAX_BYTES + "\nonnx\n")
    assert requirement_lines(str(req)) == ["numpy", "#" * (REQUIREMENTS_MAX_BYTES - len("numpy\n"))]
    assert "onnx" not in framework_packages(None, (), str(req))
