"""Who the client is, when proxies stand between it and the server (pure).

Anyone can send `X-Forwarded-For`; it says something only when the proxy that added it
is one the operator named (`tfkube server --trusted-proxy CIDR`, none by default). So:

- the connection's peer is not a trusted proxy: the peer is the client, and every
  forwarding header is ignored;
- it is: `X-Forwarded-For` is read from the right (each proxy appends the address it
  was reached from), skipping trusted proxies; the first address that is not one is
  the client. Whatever stands left of it was written by the client and is ignored.
  `X-Forwarded-Proto` (the rightmost value, `http` or `https`) is the scheme.

`Forwarded` (RFC 7239) and `X-Real-IP` are never read: a proxy that manages only
`X-Forwarded-For` passes them on as the client wrote them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """`--trusted-proxy` values (an address or a CIDR each); ValueError names a bad one."""
    out = []
    for value in values:
        text = value.strip()
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"{value!r} is not an address or a network (e.g. 10.0.0.5 or 10.0.0.0/8)"
            ) from None
    return tuple(out)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_trusted(address: str | None, trusted: tuple[Network, ...]) -> bool:
    ip = _ip(address) if address else None
    return ip is not None and any(ip in network for network in trusted)


@dataclass(frozen=True)
class Client:
    address: str
    scheme: str


def resolve_client(
    peer: str | None,
    scheme: str,
    forwarded_for: list[str],
    forwarded_proto: list[str],
    trusted: tuple[Network, ...],
) -> Client:
    """The client's address and the scheme it used. `forwarded_for`/`forwarded_proto`:
    every value of those headers, in the order received."""
    address = peer or "unknown"
    if not is_trusted(peer, trusted):
        return Client(address, scheme)
    hops = [h.strip() for value in forwarded_for for h in value.split(",") if h.strip()]
    for hop in reversed(hops):
        ip = _ip(hop)
        if ip is None:
            break  # not an address: what stands left of it cannot be trusted either
        address = str(ip)
        if not any(ip in network for network in trusted):
            break
    protos = [p.strip().lower() for value in forwarded_proto for p in value.split(",")]
    if protos and protos[-1] in {"http", "https"}:
        scheme = protos[-1]
    return Client(address, scheme)
