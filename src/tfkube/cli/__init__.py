"""`tfkube`: a thin command layer over a Backend. Parse, call the engine, print."""

from tfkube.cli import _serving  # noqa: F401  (registers serve, serving, notebook)
from tfkube.cli._app import _fail as fail
from tfkube.cli._app import app, main

__all__ = ["app", "fail", "main"]
