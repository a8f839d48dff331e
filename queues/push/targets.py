"""Which addresses a delivery may reach, checked on the address actually connected to.

A push URL is an operator's string, so a delivery could be pointed at the metadata service,
Redis or an admin port on the internal network (server-side request forgery). The pusher's
connections (``queues.push.connections``) therefore connect to :func:`connect_address`: it
resolves the host itself and keeps only public addresses, and the connection is made to that
address, so a name that resolves to a public address when checked and to 127.0.0.1 when
connected (DNS rebinding) gets nowhere. TLS still verifies
the certificate against the URL's host name (SNI and ``Host`` are the URL's, not the address).

``TASKFORGE_PUSH_ALLOW_PRIVATE=true`` (development and tests) lets every address through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(Exception):
    """The URL's host resolves only to addresses a delivery may not reach; the message says why."""


def refusal(address: IPAddress) -> str | None:
    """Why a delivery may not connect to ``address``, or None when it may (a public unicast address)."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:  # ::ffff:127.0.0.1 is 127.0.0.1
        address = mapped
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified:
        return "unspecified"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:  # shared address space (100.64.0.0/10), documentation ranges, ...
        return "not globally routable"
    return None


async def vetted_address(host: str, port: int) -> str:
    """The first address of ``host`` a delivery may connect to; raises :class:`TargetRefused` if none."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host!r}: {exc.strerror}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    reasons: list[str] = []
    for address in addresses:
        reason = refusal(address)
        if reason is None:
            return str(address)
        reasons.append(f"{address} ({reason})")
    raise TargetRefused(f"{host} resolves only to addresses a delivery may not reach: {', '.join(reasons)}")


async def connect_address(host: str, port: int, *, allow_private: bool) -> str:
    """What a connection to ``host`` connects to: a vetted address, or the host itself when
    private targets are allowed (development and tests)."""
    return host if allow_private else await vetted_address(host, port)
