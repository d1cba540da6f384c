"""The CLI's tables line up on a terminal whatever the names are: a CJK name takes two columns a
character, a combining accent none, and a cell's line break does not start a new row."""

from __future__ import annotations

from phalanx.cli.listing import _table


def test_columns_line_up_for_wide_combining_and_multi_line_cells() -> None:
    table = _table(
        ["name", "status"],
        [["实验一", "ok"], ["abc", "running"], ["e\u0301te", "failed"], ["two\nlines\r\nthree", "queued"]],
    )
    lines = table.split("\n")
    assert len(lines) == 5  # one row per experiment: the breaks are shown as \n
    assert lines[4] == "two\\nlines\\nthree  queued"
    status_at = [19, 19, 19, 19, 19]  # the widest name (17 columns) and two spaces, on every row
    name_columns = [4, 6, 3, 3, 17]  # NAME; 实验一 two columns a character; e + a combining accent
    for line, at, columns in zip(lines, status_at, name_columns, strict=True):
        name, status = line[: line.index(" ")], line.rstrip().rsplit(" ", 1)[1]
        assert len(line) - len(status) - len(name) + columns == at, line
    assert [line.rsplit(" ", 1)[1] for line in lines] == ["STATUS", "ok", "running", "failed", "queued"]


def test_an_ascii_table_is_padded_as_before() -> None:
    assert _table(["id", "x"], [["a", "1"], ["bbb", ""]], upper=1) == "ID   x\na    1\nbbb"


def test_a_lone_carriage_return_in_a_cell_cannot_write_over_its_row() -> None:
    """A parameter's value "0.1\\rlr  0.5" showed as `lr  0.5` on a terminal (the carriage return
    took the cursor back to the row's start): it is shown as \\r, like a line break as \\n."""
    lines = _table(["name", "value"], [["lr", "0.1\rlr  0.5"], ["m", "0.9"]]).split("\n")
    assert lines == ["NAME  VALUE", "lr    0.1\\rlr  0.5", "m     0.9"]
