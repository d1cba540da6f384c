"""``Record``: a few named values, compared and shown by them, as ``@dataclass(frozen=True)`` would
give, without importing ``dataclasses`` (with ``inspect``, ``ast`` and ``dis``): every replica's
reaper imports the modules that use it (``proctree``, ``cgroups``), and ``dataclasses`` was a third of
its start-up (issue 42). A subclass names its values in ``__slots__`` and sets each once, in
``__init__``: then it is read-only, as a frozen dataclass is."""

from __future__ import annotations


class Record:
    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, name):
            raise AttributeError(f"{type(self).__name__}.{name} is read-only")
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({shown})"
