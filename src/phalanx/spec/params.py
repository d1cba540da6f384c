"""`--param name=value` arguments as typed values.

On its own, without the schema and the YAML tree: `phalanx run --detach` reads its `--param`s
here and leaves loading the file to the supervisor it starts (docs/cli-speed.md); YAML is imported
only to read a value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from phalanx.errors import UsageError

_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LEADING_ZERO = re.compile(r"^[+-]?0[0-9xXoObB_]")


def parse_param_overrides(items: Iterable[str]) -> dict[str, Any]:
    """`--param name=value` arguments -> {name: value}; values read as YAML scalars.

    `lr=0.1` gives 0.1, `flag=true` gives True, `name=abc` gives "abc", `x=` gives "". A list or
    mapping must be written as JSON (`layers=[64, 32]`, `opt={"lr": 0.1}`); YAML's flow forms
    (`{lr: 0.1}`) are refused, since what the command receives would differ from what was typed. Text
    that YAML cannot read (`'unclosed`, `a: b`) is kept as given. A later argument for the same
    name wins. Raises UsageError naming the bad argument.
    """
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep:
            raise UsageError(f"--param {item!r}: expected NAME=VALUE, e.g. --param lr=0.01")
        if not _PARAM_NAME.match(name):
            raise UsageError(
                f"--param {item!r}: {name!r} is not a parameter name"
                " (letters, digits and _, not starting with a digit)"
            )
        out[name] = _scalar(raw, item)
    return out


def _scalar(raw: str, item: str = "") -> Any:
    if raw.strip() == "":
        return raw
    if raw.lstrip().startswith(("[", "{")):
        try:
            return json.loads(raw)
        except ValueError:
            raise UsageError(
                f"--param {item!r}: a list or mapping must be JSON, e.g. --param 'layers=[64, 32]' or"
                """ --param 'opt={"lr": 0.1}' (quote it for the shell); for text, write it as a JSON"""
                " string"
            ) from None
    import yaml  # why: `run --detach`: YAML only when a value is given

    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if isinstance(value, int) and not isinstance(value, bool) and _LEADING_ZERO.match(raw.strip()):
        return raw  # `0123` or `0x1f` stay text: ids more often than YAML 1.1 octal numbers
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return raw  # lists, mappings, dates: the text as given
