"""New ids look as every id so far did (12 lowercase hex characters: what `phalanx get a3f` and the
REST API's id checks expect), and temporary names as many characters as asked, without ``uuid``."""

from __future__ import annotations

import re

from phalanx.ids import new_id, random_hex


def test_a_new_id_is_twelve_lowercase_hex_characters_and_ids_differ() -> None:
    made = {new_id() for _ in range(1000)}
    assert len(made) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{12}", i) for i in made), sorted(made)[:5]


def test_random_hex_gives_as_many_characters_as_asked_odd_counts_too() -> None:
    for n in (1, 7, 8, 11, 12, 32):
        assert re.fullmatch(rf"[0-9a-f]{{{n}}}", random_hex(n)), n
