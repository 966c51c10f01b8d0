"""Where `tfkube login` keeps the server's URL and the personal API token: one JSON file,
readable by its owner only (0600), under $XDG_CONFIG_HOME/tfkube (default ~/.config)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from tfkube import contract


@dataclass(frozen=True)
class Login:
    url: str
    token: str
    team: str | None = None
    """The team commands use when none is named (the first one, at login)."""


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tfkube"


def login_file() -> Path:
    return config_dir() / "login.json"


def save_login(login: Login) -> Path:
    path = login_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".login.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(login), f)
    tmp.replace(path)
    return path


def load_login() -> Login | None:
    """The saved login, overridden by $TFKUBE_URL / $TFKUBE_TOKEN / $TFKUBE_TEAM."""
    saved: dict[str, str | None] = {}
    try:
        saved = json.loads(login_file().read_text())
    except (OSError, ValueError):
        saved = {}
    url = os.environ.get(contract.CLIENT_URL) or saved.get("url")
    token = os.environ.get(contract.CLIENT_TOKEN) or saved.get("token")
    team = os.environ.get(contract.CLIENT_TEAM) or saved.get("team")
    if not url or not token:
        return None
    return Login(url=url, token=token, team=team)
