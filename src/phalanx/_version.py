"""Phalanx's version, in a module of its own: the CLI, the server, the SDK copy and the repro record
read it from here, so none of them imports the package root (whose public surface names the rooms
above them)."""

__version__ = "0.1.0"
