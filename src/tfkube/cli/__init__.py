"""`tfkube`: a thin command layer over a Backend. Parse, call the engine, print.

The commands live in `_app` and are imported by `main`, with Ctrl-C held meanwhile:
a Ctrl-C during the half second of imports (pydantic builds its validators then, and
would report the interrupt as a schema error) exits 130 cleanly, like one at any other
moment.
"""

from __future__ import annotations

import signal
from typing import Any

EXIT_INTERRUPTED = 130


def main() -> None:
    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: got.append(signum))
    try:
        from tfkube.cli._app import app
    finally:
        signal.signal(signal.SIGINT, previous)
    if got:
        raise SystemExit(EXIT_INTERRUPTED)
    app()


def __getattr__(name: str) -> Any:
    if name == "app":
        from tfkube.cli._app import app

        return app
    raise AttributeError(name)


__all__ = ["main"]
