"""The Python client of the tfkube server (`tfkube.Client`), and `ServerBackend`: the
`Backend` interface spoken over the server's REST API, so the CLI works against a server.

May import `tfkube.backends` and below; never `tfkube.server` or `tfkube.cli`.
"""

from tfkube.client import wire

__all__ = ["wire"]
