"""Which network addresses tfkube fetches from on a member's behalf (pure, standard
library): anything but a public unicast address is refused unless an administrator
allowed its range (`tfkube server --allow-fetch-from`). The server's fetches
(`server/core/fetch.py`) and an engine staging a team's data source (the DataNodes a
NameNode redirects to) judge addresses with the same rule."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _views(address: IPAddress) -> list[IPAddress]:
    """The address, or the IPv4 address it stands for (pure): an IPv4-mapped or NAT64
    address is its IPv4 address; a 6to4 address is judged as both."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return [address.ipv4_mapped]
        if address in _NAT64:
            return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
        if address.sixtofour is not None:
            return [address, address.sixtofour]
    return [address]


def _internal(address: IPAddress) -> bool:
    return (
        not address.is_global
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or address.is_reserved
        or (isinstance(address, ipaddress.IPv6Address) and address.is_site_local)
        or (isinstance(address, ipaddress.IPv4Address) and address in _CGNAT)
    )


def _within(address: IPAddress, allowed: Sequence[IPNetwork]) -> bool:
    return any(address.version == net.version and address in net for net in allowed)


def refused(address: str | IPAddress, allowed: Sequence[IPNetwork] = ()) -> bool:
    """Whether the server refuses to fetch from `address` for a member (pure): anything
    but a public unicast address, unless it lies in a range an admin allowed."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if _within(ip, allowed):
        return False
    return any(_internal(v) and not _within(v, allowed) for v in _views(ip))


def index_target(url: str) -> tuple[str, int]:
    """(host, port) of a package index URL (`--package-index`: the one host and port a
    confined install step may reach besides PyPI's) (pure). Raises ValueError naming the
    fix."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"package index {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"package index {url!r}: give an http:// or https:// URL with a host, "
            "e.g. https://pypi.org/simple/"
        )
    return parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)
