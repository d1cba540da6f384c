"""Where a server may send its alert hooks: never to itself or its network's neighbours unless its
admin says so (docs/alerts.md#where-hooks-may-point).

A hook's address is chosen by a project's editor, and the server POSTs to it from inside the
network it runs in. Without a guard an editor could have the server call what trusts that position:
a Ray head's job API or an admin page on its loopback, a cloud's metadata service at
169.254.169.254, a database's HTTP port on the private network, and read the status each answered
in the delivery log. As GitLab does for webhooks ("allow requests to the local network", off by
default), an address that is loopback, link-local, private (RFC 1918, unique-local IPv6), shared
(100.64.0.0/10), multicast, unspecified or otherwise not public is refused, unless `phalanx server
--hook-allow` names its host or a network holding it (an on-premises Mattermost, a test's receiver).

The address is checked where the connection is made, against the address it is made to: a name
that resolves to a public address when the hook is added and to 127.0.0.1 when it is sent is still
refused. An IPv6 address that carries an IPv4 one (mapped, compatible, NAT64, 6to4, Teredo) is
judged by the IPv4 address. Redirects are not followed (a public receiver could redirect anywhere).
Through a proxy the server's environment names for the hook's scheme (HTTP_PROXY for http://,
HTTPS_PROXY for https://, not bypassed by NO_PROXY) the connection is the proxy's; the receiver's
name is then checked as this machine resolves it, which is the most a client can do.
"""

from __future__ import annotations

import functools
import http.client
import ipaddress
import socket
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from phalanx.errors import UsageError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class HookRefused(OSError):
    """A hook's address is one the server does not send to (an OSError: a try that failed)."""


# IPv6 ranges that carry an IPv4 address in their last 32 bits (IPv4-compatible, IPv4-translated,
# the well-known NAT64 prefix): a gateway may turn them into that IPv4 address
_EMBEDDING = tuple(ipaddress.ip_network(n) for n in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96"))
# IPv6 ranges refused whatever they carry: local-use NAT64 (RFC 8215) and deprecated site-local
_LOCAL_V6 = tuple(ipaddress.ip_network(n) for n in ("64:ff9b:1::/48", "fec0::/10"))


def _inner(ip: Address) -> Address:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, translated, NAT64, 6to4,
    Teredo's client), else ``ip`` itself."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    compatible, translated, nat64 = _EMBEDDING
    if ip in translated or ip in nat64 or (ip in compatible and int(ip) > 1):  # (:: and ::1 are their own)
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def _address_of(host: str) -> Address | None:
    """The address a host is written as (None: a name)."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _kind(ip: Address) -> str | None:
    """What makes ``ip`` no public address (None: it is one)."""
    if isinstance(ip, ipaddress.IPv6Address) and any(ip in n for n in _LOCAL_V6):
        return "private"
    ip = _inner(ip)
    for kind, test in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("unspecified", ip.is_unspecified),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
    ):
        if test:
            return kind
    return None if ip.is_global else "non-public"


@dataclass(frozen=True)
class HookGuard:
    """The hosts and networks an admin lets hooks reach although they are not public."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def allowing(cls, given: Iterable[str]) -> HookGuard:
        """From `--hook-allow` values: each a host name, an address or a network (CIDR)."""
        hosts: set[str] = set()
        networks: list[Network] = []
        for raw in given:
            value = raw.strip().lower()
            try:
                networks.append(ipaddress.ip_network(value, strict=False))
                continue
            except ValueError:
                pass
            if not value or any(not (c.isalnum() or c in ".-") for c in value):
                raise UsageError(
                    f"--hook-allow {raw!r}: give a host name, an address or a network"
                    " (e.g. chat.corp.example, 10.2.0.7 or 10.0.0.0/8)"
                )
            hosts.add(value.rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def refusal(self, host: str, address: str) -> str | None:
        """Why a hook to ``host`` may not connect to ``address`` (None: it may)."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        named = host.lower().rstrip(".") in self.hosts
        if named or any(ip in n or _inner(ip) in n for n in self.networks):
            return None
        kind = _kind(ip)
        if kind is None:
            return None
        article = "an" if kind[0] in "aeiou" else "a"
        # a name's address is not said: the delivery log is the project's viewers' to read
        what = f"{host} is" if _address_of(host) == ip else f"{host} resolves to"
        return (
            f"{what} {article} {kind} address: hooks are sent only to public addresses unless the"
            f" server's admin allows this one (`phalanx server --hook-allow {host}`)"
        )

    def connect(
        self, host: str, port: int, timeout: float | None, source: tuple[str, int] | None = None
    ) -> socket.socket:
        """A connection to ``host:port`` at one of its addresses the guard lets through (HookRefused
        when it has none; the last error of those it let through otherwise)."""
        refused: list[str] = []
        failed: OSError | None = None
        for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            why = self.refusal(host, str(sockaddr[0]))
            if why:
                refused.append(why)
                continue
            sock = socket.socket(family, kind, proto)
            try:
                if timeout is not None:
                    sock.settimeout(timeout)
                if source:
                    sock.bind(source)
                sock.connect(sockaddr)
                return sock
            except OSError as exc:
                sock.close()
                failed = exc
        if failed is not None:
            raise failed
        raise HookRefused(refused[0] if refused else f"{host} has no address")

    def check_literal(self, url: str) -> None:
        """HookRefused when ``url`` names a refused address outright: an IP address, or localhost
        (RFC 6761). What a name resolves to is checked when a hook is sent, not here (a lookup
        would wait on DNS, and the answer may change before the send)."""
        host = (urllib.parse.urlsplit(url).hostname or "").rstrip(".")
        if host == "localhost" or host.endswith(".localhost"):
            address = "127.0.0.1"
        else:
            try:
                address = str(ipaddress.ip_address(host))
            except ValueError:
                return
        why = self.refusal(host, address)
        if why:
            raise HookRefused(why)

    def check_resolved(self, url: str) -> None:
        """HookRefused when ``url``'s host resolves (here, now) to a refused address; for a send
        through a proxy, which makes the connection itself."""
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        for *_, sockaddr in socket.getaddrinfo(host, parts.port or 443, type=socket.SOCK_STREAM):
            why = self.refusal(host, str(sockaddr[0]))
            if why:
                raise HookRefused(why)

    def opener(self, url: str) -> urllib.request.OpenerDirector:
        """What sends one hook to ``url``: guarded connections, no redirects, and the server's proxy
        where its environment names one for this host (after ``check_resolved``)."""
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        proxy = urllib.request.getproxies().get(parts.scheme)  # NO_PROXY alone names no proxy
        if proxy and not urllib.request.proxy_bypass(host):
            self.check_resolved(url)
            return urllib.request.build_opener(
                urllib.request.ProxyHandler({parts.scheme: proxy}), _NoRedirect()
            )
        return urllib.request.build_opener(
            urllib.request.ProxyHandler({}), _Guarded(self), _GuardedTLS(self), _NoRedirect()
        )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx is the receiver's answer, not an address to go on to."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _connection(guard: HookGuard, base: type[http.client.HTTPConnection]) -> Any:
    """``base`` whose socket is made by ``guard.connect`` (TLS, when ``base`` has it, still wraps it
    for the host's name)."""

    def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
        conn = base(host, **kwargs)
        conn._create_connection = functools.partial(_guarded_socket, guard, conn)  # type: ignore[attr-defined]
        return conn

    return make


def _guarded_socket(
    guard: HookGuard,
    conn: http.client.HTTPConnection,
    address: tuple[str, int],
    timeout: float | None = None,
    source: tuple[str, int] | None = None,
) -> socket.socket:
    return guard.connect(conn.host, address[1], timeout, source)


class _Guarded(urllib.request.HTTPHandler):
    def __init__(self, guard: HookGuard) -> None:
        super().__init__()
        self.guard = guard

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection(self.guard, http.client.HTTPConnection), req)


class _GuardedTLS(urllib.request.HTTPSHandler):
    def __init__(self, guard: HookGuard) -> None:
        super().__init__()
        self.guard = guard

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_connection(self.guard, http.client.HTTPSConnection), req)
