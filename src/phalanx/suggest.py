"""Did-you-mean: the choice nearest to what was typed, or none.

Choices are ranked by edit distance (Levenshtein, with a swap of two neighbouring letters as one
step: `prdo` -> prod) between normalised tokens: case folded, `_` and `-` dropped, so `1gi` is one
step from nothing but `Gi` (difflib's ratio used to offer 'Ti') and `Workers` reads like `workers`.
Only choices within about a third of the word's letters count (or that the word contains, or is
part of: `pytorch-ignite` -> pytorch), and a farther choice is never offered over a nearer one.
When several are equally near, the one that fits the value given (``fits``: `workers: 2` is a
count, so `n_workers`, not the `worker` list) wins, then the one closest as written. Standard
library only."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable


def normalise(token: str) -> str:
    return token.casefold().replace("_", "").replace("-", "")


def distance(a: str, b: str) -> int:
    """Edit distance: insertions, deletions, substitutions and swaps of two neighbouring letters
    (optimal string alignment), so `prdo` is one step from `prod`, as `prd` is, not two."""
    if len(a) < len(b):
        a, b = b, a
    before: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            step = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                step = min(step, before[j - 2] + 1)
            current.append(step)
        before, previous = previous, current
    return previous[-1]


def closest(word: str, choices: Iterable[str], fits: Callable[[str], bool] | None = None) -> str | None:
    """The nearest choice to ``word`` (see the module's docstring), or None when none is near."""
    target = normalise(word)
    limit = max(1, len(target) // 3)
    scored = []
    for choice in dict.fromkeys(choices):
        token = normalise(choice)
        d = distance(target, token)
        inside = min(len(token), len(target)) >= 4 and (token in target or target in token)
        if ((d <= limit and d < len(target)) or inside) and choice != word:
            fit = fits(choice) if fits is not None else True
            ratio = difflib.SequenceMatcher(None, word, choice).ratio()
            scored.append((d, not fit, -ratio, choice))
    return min(scored)[3] if scored else None


def did_you_mean(word: str, choices: Iterable[str], fits: Callable[[str], bool] | None = None) -> str:
    """ "; did you mean 'X'?" or ""."""
    best = closest(word, choices, fits)
    return f"; did you mean '{best}'?" if best is not None else ""
