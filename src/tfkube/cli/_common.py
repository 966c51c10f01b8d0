"""What the CLI's modules share: the command group, the consoles, the error exit, the
local engine as the CLI runs it, and the engine options.

Exit codes of every command: 0 it did what it said (`run`: the job succeeded), 1 it
could not (`run`: the job failed; a job not found), 2 bad input (nothing was started),
128+N stopped by signal N (`_lifetime.py`: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tfkube import contract
from tfkube.engines.local import LocalBackend

app = typer.Typer(
    help="Distributed TensorFlow training as one command.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print `error: message` and return the exit to raise."""
    err.print(f"[red]error:[/red] {message}", highlight=False, markup=True)
    return typer.Exit(code)


def local_backend(package_indexes: tuple[str, ...] = ()) -> LocalBackend:
    """The local engine; it forks its supervisors (the CLI is single-threaded).
    `package_indexes`: where a code's requirements.txt installs from (`--package-index`)."""
    return LocalBackend(fork_supervisor=True, package_indexes=package_indexes)


EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        envvar=contract.ENGINE,
        help="Where jobs run: local (processes here), kubernetes (the kubeconfig's cluster) "
        "or server (the tfkube server of `tfkube login`).",
    ),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="Kubernetes engine: the namespace (default: the context's); server: the team.",
    ),
]
KubeconfigOpt = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="Kubernetes engine: kubeconfig file (default: $KUBECONFIG)."),
]
