"""Kubernetes quantities as numbers (`resources.cpu`, `resources.memory`). Pure.

One reading for everything that counts them: the server's local queue (what a job
requests) and the local engine's cgroups (what a replica may use)."""

from __future__ import annotations

import re

_SUFFIXES = {
    "": 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
}
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)")


def _value(quantity: str) -> float:
    m = _QUANTITY.fullmatch(quantity.strip())
    if m is None or m.group(2) not in _SUFFIXES:
        raise ValueError(f"{quantity!r} is not a quantity; write e.g. '2', '500m', '4Gi'")
    return float(m.group(1)) * _SUFFIXES[m.group(2)]


def cpu_cores(quantity: str) -> float:
    """A CPU quantity ("2", "500m") in cores."""
    return _value(quantity)


def memory_bytes(quantity: str) -> int:
    """A memory quantity ("4Gi", "512M") in bytes (rounded up, as Kubernetes does)."""
    value = _value(quantity)
    whole = int(value)
    return whole if whole == value else whole + 1
