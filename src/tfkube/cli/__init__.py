"""`tfkube`: a thin command layer over a Backend. Parse, call the engine, print.

`app` is the command group; `fail` and `run_service` are for the commands `tfkube._main`
adds (`tfkube server`), so that they exit and stop as every other command does."""

from tfkube.cli import _app, _workloads  # noqa: F401  (register the commands)
from tfkube.cli._common import app, fail
from tfkube.cli._lifetime import run_service

__all__ = ["app", "fail", "run_service"]
