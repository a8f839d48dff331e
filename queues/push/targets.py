"""Which addresses a delivery may reach, checked on the address actually connected to.

A push URL is an operator's string, so a delivery could be pointed at the metadata service,
Redis or an admin port on the internal network (server-side request forgery). The pusher's
connections therefore go through :class:`VettingBackend`: it resolves the host itself, keeps
only public addresses, and connects to one of those, so a name that resolves to a public address
when checked and to 127.0.0.1 when connected (DNS rebinding) gets nowhere. TLS still verifies
the certificate against the URL's host name (SNI and ``Host`` are the URL's, not the address).

``TASKFORGE_PUSH_ALLOW_PRIVATE=true`` (development and tests) lets every address through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import httpcore

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
        raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc.strerror}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    reasons: list[str] = []
    for address in addresses:
        reason = refusal(address)
        if reason is None:
            return str(address)
        reasons.append(f"{address} ({reason})")
    raise TargetRefused(f"{host} resolves only to addresses a delivery may not reach: {', '.join(reasons)}")


class VettingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to vetted addresses (unless private targets are allowed)."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        address = host if self.allow_private else await vetted_address(host, port)
        return await self._inner.connect_tcp(
            address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise TargetRefused("push targets are TCP addresses only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
