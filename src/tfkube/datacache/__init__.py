"""The per-node data cache (`python -m tfkube.datacache`): run by `tfkube install` as a
DaemonSet in tfkube's system namespace, it answers a node's replica pods' data requests
(the server's data route, `tfkube.contract` "Data") from the node's disk when the server
says, for the caller's own token, which content it may read. See `_server` for the door,
`_store` for the disk."""

from tfkube.datacache._server import Counters, NodeCache, make_server
from tfkube.datacache._store import (
    DiskCache,
    Entry,
    Incomplete,
    KeyAnswer,
    parse_key_answer,
    parse_size,
    plan_eviction,
)

__all__ = [
    "Counters",
    "DiskCache",
    "Entry",
    "Incomplete",
    "KeyAnswer",
    "NodeCache",
    "make_server",
    "parse_key_answer",
    "parse_size",
    "plan_eviction",
]
