"""The `tfkube` command's entry point: import the program with Ctrl-C held.

The imports take about half a second (pydantic builds its validators then, and would
report an interrupt as a schema error). A Ctrl-C meanwhile exits 130 cleanly once they
are done, like a Ctrl-C at any later moment, instead of a traceback (SIGTERM and SIGHUP
keep their default action meanwhile: the process ends, and nothing was started yet).
Nothing else here: `tfkube._main` is the program.
"""

from __future__ import annotations

import signal

from tfkube.contract import signal_exit_code  # standard library only: adds nothing to wait for


def main() -> None:
    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: got.append(signum))
    try:
        from tfkube._main import main as program
    finally:
        signal.signal(signal.SIGINT, previous)
    if got:
        raise SystemExit(signal_exit_code(signal.SIGINT))
    program()
