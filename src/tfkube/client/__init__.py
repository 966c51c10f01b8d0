"""The Python client of the tfkube server (`tfkube.Client`), and `ServerBackend`: the
`Backend` interface spoken over the server's REST API, so the CLI works against a server.

May import `tfkube.engines` and below; never `tfkube.server` or `tfkube.cli`.
"""

from tfkube import wire
from tfkube.client._backend import ServerBackend, job_view
from tfkube.client._client import Client, ServerError, pack_folder, token_by_password
from tfkube.client._config import Login, load_login, login_file, save_login

__all__ = [
    "Client",
    "Login",
    "ServerBackend",
    "ServerError",
    "job_view",
    "load_login",
    "login_file",
    "pack_folder",
    "save_login",
    "token_by_password",
    "wire",
]
