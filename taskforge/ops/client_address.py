"""The address of the client behind a request, honouring trusted reverse proxies.

Behind a reverse proxy or load balancer ``REMOTE_ADDR`` is the proxy's address,
the same for every client: anything keyed on it (the admin login throttle)
would treat all clients as one. When ``REMOTE_ADDR`` is one of
``TASKFORGE_TRUSTED_PROXIES`` (addresses or networks), the client is read from
``X-Forwarded-For`` instead: the right-most address there that is not itself a
trusted proxy, because each proxy appends the address it received the request
from, and anything to the left of that may be forged by the client. A request
from any other address keeps ``REMOTE_ADDR`` and its ``X-Forwarded-For`` is
ignored, so a client cannot choose its own address by sending the header.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _networks(trusted: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in trusted)


def _is_trusted(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def client_address(request: HttpRequest | None) -> str:
    """The client's address as far as it can be trusted; ``-`` when unknown."""
    if request is None:
        return "-"
    return address_of(str(request.META.get("REMOTE_ADDR") or "-"), str(request.META.get("HTTP_X_FORWARDED_FOR", "")))


def address_of(remote: str, forwarded_for: str) -> str:
    """``client_address`` from the raw values: the peer's address and the ``X-Forwarded-For`` header."""
    networks = _networks(tuple(settings.TASKFORGE_TRUSTED_PROXIES))
    if not networks or not _is_trusted(remote, networks):
        return remote
    hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop, networks):
            return hop[:64]  # what our own proxy says; bounded, it becomes part of a key and a log line
    return hops[0][:64] if hops else remote
