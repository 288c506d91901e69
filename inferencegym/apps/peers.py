"""Who is the client? The address the per-client limits count, with forwarding headers trusted
only from configured proxies.

``X-Forwarded-For``, ``X-Real-IP`` and ``Forwarded`` are written by whoever sends the request, so a
client can claim any address in them. They are believed only when the TCP peer is one of the
configured proxies (``INFERENCEGYM_TRUSTED_PROXIES``, addresses or CIDR networks; default: none).
Then the client is the right-most forwarded address that is not itself a trusted proxy.

A request that carries a forwarding header from an untrusted peer is counted as the one client
``"untrusted-forwarded"``: whatever addresses it claims, all such requests share one per-client cap.
(uvicorn's own proxy-header handling may already have rewritten the peer from such a header, so the
peer address of a request with forwarding headers is not trusted either; the launchers turn it off.)
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from typing import Any

TRUSTED_PROXIES_ENV = "INFERENCEGYM_TRUSTED_PROXIES"
"""Comma-separated proxy addresses or CIDR networks whose forwarding headers are believed."""
UNTRUSTED_FORWARDED = "untrusted-forwarded"
"""The client key of every request carrying forwarding headers from a peer that is not a proxy."""
_FORWARDING_HEADERS = (b"x-forwarded-for", b"x-real-ip", b"forwarded")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_proxies(items: Iterable[str]) -> tuple[Network, ...]:
    """Addresses / CIDR networks -> networks; raises ValueError naming the bad entry."""
    nets = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"trusted proxy {item!r:.60} is not an IP address or CIDR network "
                             f"(e.g. 10.0.0.5 or 10.0.0.0/24)") from None
    return tuple(nets)


def trusted_proxies_from_env() -> tuple[str, ...]:
    raw = os.environ.get(TRUSTED_PROXIES_ENV, "")
    return tuple(x.strip() for x in raw.split(",") if x.strip())


def _is_trusted(host: str, nets: tuple[Network, ...]) -> bool:
    if not nets:
        return False
    try:
        ip = ipaddress.ip_address(host.strip().strip("[]"))
    except ValueError:
        return False
    return any(ip in n for n in nets)


def _forwarded_chain(headers: Iterable[tuple[bytes, bytes]]) -> list[str] | None:
    """The client chain claimed by the forwarding headers (left = original client), or None."""
    xff: list[str] = []
    real_ip = forwarded = None
    for name, value in headers:
        if name == b"x-forwarded-for":
            xff.extend(p.strip() for p in value.decode("latin-1").split(","))
        elif name == b"x-real-ip":
            real_ip = value.decode("latin-1").strip()
        elif name == b"forwarded":
            forwarded = [part.split("=", 1)[1].strip().strip('"') for elem in
                         value.decode("latin-1").split(",") for part in elem.split(";")
                         if part.strip().lower().startswith("for=")]
    if xff:
        return xff
    if forwarded:
        return forwarded
    if real_ip:
        return [real_ip]
    return None


def client_key(scope: dict[str, Any], trusted: tuple[Network, ...] = ()) -> str:
    """The address a request's per-client limits are counted under (see the module docstring)."""
    client = scope.get("client")
    peer = str(client[0]) if client else ""
    headers = scope.get("headers", ())
    if not any(name in _FORWARDING_HEADERS for name, _ in headers):
        return peer
    if not _is_trusted(peer, trusted):
        return UNTRUSTED_FORWARDED
    chain = _forwarded_chain(headers) or []
    for hop in reversed(chain):
        if hop and not _is_trusted(hop, trusted):
            return hop[:64]
    return peer


__all__ = ["client_key", "parse_proxies", "trusted_proxies_from_env", "TRUSTED_PROXIES_ENV",
           "UNTRUSTED_FORWARDED"]
