"""Size limits on src/phalanx: no function over 100 lines, no module over 600 lines (issue 23).

Long functions and modules hide several jobs in one place; the limits keep each piece small enough
to read and test on its own. Alembic migrations (written once, never edited) and the vendored web UI
libraries are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import phalanx

SRC = Path(phalanx.__file__).resolve().parent
EXCLUDED = (SRC / "store" / "migrations", SRC / "server" / "ui" / "vendor")
MAX_FUNCTION_LINES = 100
MAX_FILE_LINES = 600


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if not any(p.is_relative_to(e) for e in EXCLUDED))


def _function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """From the first decorator (a Typer command's options are part of it) to the last line."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return (node.end_lineno or node.lineno) - first + 1


def oversized(paths: list[Path], root: Path) -> list[str]:
    """``file:function:lines`` for each function over the limit, ``file:lines`` for each file."""
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(root)
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            found.append(f"{where}:{lines} lines (max {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = _function_lines(node)
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{where}:{node.name}:{length} lines (max {MAX_FUNCTION_LINES})")
    return found


def test_the_scan_covers_the_package_but_not_migrations_or_vendored_code() -> None:
    paths = _sources()
    assert SRC / "cli" / "main.py" in paths
    assert SRC / "server" / "app.py" in paths
    assert not [p for p in paths if "migrations" in p.parts or "vendor" in p.parts]


def test_the_scan_names_a_long_function_with_its_decorators_and_a_long_file(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 2))
    fits = f"@decorator\ndef fits():\n{body}\n"  # 100 lines with the decorator
    too_long = f"@decorator\n@another\ndef too_long():\n{body}\n"  # 101
    (tmp_path / "short.py").write_text(fits + too_long)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    (tmp_path / "fine.py").write_text("x = 1\n" * MAX_FILE_LINES)
    found = oversized(sorted(tmp_path.glob("*.py")), tmp_path)
    assert found == [
        f"long.py:{MAX_FILE_LINES + 1} lines (max 600)",
        f"short.py:too_long:{MAX_FUNCTION_LINES + 1} lines (max 100)",
    ]


def test_no_function_over_100_lines_and_no_file_over_600_lines() -> None:
    found = oversized(_sources(), SRC.parent)
    assert not found, "split these (issue 23):\n" + "\n".join(found)
