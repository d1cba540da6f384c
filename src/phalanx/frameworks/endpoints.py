"""Where each replica can be reached (``Endpoints``): in a module of its own so that every framework's
module imports it without importing ``phalanx.frameworks`` itself, which picks the framework's module
(no circle between the package and its members). ``phalanx.frameworks`` re-exports it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from phalanx.plan import Plan


@dataclass(frozen=True)
class Endpoints:
    """Where each replica can be reached: a host and a port per replica name, chosen by the backend."""

    hosts: Mapping[str, str]
    ports: Mapping[str, int]
    interface: str | None = None  # the network interface MXNet's ps-lite binds (lo on one machine)

    def address(self, replica: str) -> str:
        return f"{self.hosts[replica]}:{self.ports[replica]}"

    @classmethod
    def on_host(
        cls, plan: Plan, host: str, ports: Mapping[str, int], interface: str | None = None
    ) -> Endpoints:
        """Every replica on one host (the local engine)."""
        return cls(hosts={r.name: host for r in plan.replicas}, ports=dict(ports), interface=interface)
