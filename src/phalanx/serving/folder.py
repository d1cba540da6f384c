"""A registered model served as a server's service (docs/services.md): the version to serve is
handed over as files in a folder, and ``python -m phalanx.serving.folder --folder F --socket S``
serves it on a Unix socket behind the server's proxy.

The server (phalanx.server.services), which reads its registry, writes ``vN.onnx`` and then
``current.json`` (the version's record, replaced atomically) whenever the alias it follows moves.
The serving process, in the project's box with no store and no token, follows ``current.json``
as ``phalanx serve`` follows an alias (phalanx.serving.follower): the new version is loaded and
checked against its sha256 in full before one reference swaps, so no request waits or fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from phalanx.registry.parity import ParityFailed
from phalanx.store.registry_records import ModelRef, ModelVersion, parse_ref

CURRENT = "current.json"


def publish(folder: Path, version: ModelVersion, data: bytes) -> None:
    """Hand ``version`` (its ONNX bytes ``data``) to the serving process: the file first, then the
    record that names it, swapped in by a rename."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"v{version.version}.onnx").write_bytes(data)
    record = folder / f".{CURRENT}.tmp"
    record.write_text(json.dumps(dataclasses.asdict(version)))
    os.chmod(record, 0o644)
    os.replace(record, folder / CURRENT)


def published(folder: Path) -> int | None:
    """The version the folder hands over now (None: none yet)."""
    try:
        return int(json.loads((folder / CURRENT).read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


class FolderRegistry:
    """``resolve`` and ``read_bytes`` of a registry, over a folder ``publish`` writes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def resolve(self, ref: ModelRef) -> ModelVersion:
        return ModelVersion(**json.loads((self.folder / CURRENT).read_text()))

    def read_bytes(self, version: ModelVersion) -> bytes:
        data = (self.folder / f"v{version.version}.onnx").read_bytes()
        if hashlib.sha256(data).hexdigest() != version.sha256:
            raise ParityFailed(
                f"{version.name} version {version.version}: its file does not match its sha256"
            )
        return data


def under(prefix: str, app: ASGIApp) -> ASGIApp:
    """``app`` answering under ``prefix`` (the proxy forwards ``/services/ID/v1/...`` as it is): the
    prefix taken off each request's path; its lifespan passes through as it is."""

    async def strip(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if prefix and scope["type"] in ("http", "websocket") and path.startswith(prefix):
            scope = {**scope, "path": path[len(prefix) :] or "/", "raw_path": None, "root_path": prefix}
        await app(scope, receive, send)

    return strip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m phalanx.serving.folder")
    parser.add_argument("--folder", required=True, type=Path)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--ref", required=True, help="what the server follows (NAME@alias): said in /healthz")
    parser.add_argument("--poll-seconds", type=float, default=0.5)
    parser.add_argument("--root-path", default="", help="the path the proxy serves it under (/services/ID)")
    args = parser.parse_args(argv)
    import uvicorn  # why: the serve extra, as `phalanx serve`'s (its check comes first there)

    from phalanx.serving.app import ServeOptions, create_serving_app  # why: the serve extra (numpy)
    from phalanx.serving.follower import Follower  # why: as above; the server imports publish only

    registry = FolderRegistry(args.folder)
    ref = parse_ref(args.ref)  # an alias is followed: the server moves what the folder names
    first = registry.resolve(ref)
    follower = Follower(ref, registry.resolve, registry.read_bytes, poll_seconds=args.poll_seconds)
    app = create_serving_app(follower, ServeOptions(token=None))  # the proxy checks who asks
    print(f"serving {first.name} (version {first.version}) on {args.socket}", file=sys.stderr, flush=True)
    config = uvicorn.Config(under(args.root_path, app), uds=args.socket, log_level="warning", lifespan="on")
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
