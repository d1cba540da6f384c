"""The boot every replica's Python runs at its start names the writer modules itself (importing
the capture module there is what it saves): its names must be the capture module's."""

from __future__ import annotations

import ast

from phalanx.tracking import boot, tensorboard


def test_the_boot_arms_the_same_writer_modules_the_capture_patches() -> None:
    source = (boot.BOOT_DIR / "sitecustomize.py").read_text()
    assigned = {
        getattr(target, "id", ""): node.value
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        for target in node.targets
    }
    names = ast.literal_eval(assigned["_WRITER_MODULES"])
    assert tuple(names) == tensorboard.WRITER_MODULES
