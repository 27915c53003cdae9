"""Which addresses a shared app (lab, Space) may be told to reach by the people using it.

The Chat tab's `server` and `ollama` backends send requests to a URL the visitor types, from
the app's machine. On a laptop that is the user's own business; on a Space or a shared
workstation it would let anyone use the app to reach what only that machine can: its loopback
services, the lab's private network, a cloud's metadata address (169.254.169.254). So there a
URL whose host is, or resolves to, a loopback, private, link-local or otherwise non-public
address is refused, unless the admin allows it in DRAGONFARM_ALLOW_PRIVATE_BACKENDS (host
names, addresses or networks, comma-separated, or `*`): a lab with its own Ollama on the
workstation sets `localhost`. Standard library only.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from urllib.parse import urlsplit

ALLOW_ENV = "DRAGONFARM_ALLOW_PRIVATE_BACKENDS"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _allowed(host: str, addresses: list[Address], allow: list[str]) -> bool:
    """Whether the admin's list names this host, one of its addresses, or a network of one."""
    for entry in allow:
        if entry == "*" or entry.lower() == host.lower():
            return True
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if any(a in network for a in addresses):
            return True
    return False


def _addresses(host: str) -> list[Address]:
    """The host's addresses (an IP literal is its own); [] when the name does not resolve."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in found]


def private_url_refusal(url: str, allow: str | None = None) -> str | None:
    """Why a shared app may not reach `url`: its host is (or resolves to) a non-public
    address the admin did not allow. None when it may (a name that does not resolve is left
    to fail as it will, saying so)."""
    host = (urlsplit(url.strip()).hostname or "").strip("[]")
    if not host:
        return None
    addresses = _addresses(host)
    private = [a for a in addresses if not a.is_global]
    listed = [e.strip() for e in (allow or os.environ.get(ALLOW_ENV, "")).split(",")]
    if not private or _allowed(host, addresses, [e for e in listed if e]):
        return None
    return (
        f"Refused {url.strip()!r}: {host} is {private[0]}, an address inside this machine or "
        "its network, which people using this shared app may not make it reach. Use a public "
        f"address, or ask the admin to allow it ({ALLOW_ENV}={host})."
    )
