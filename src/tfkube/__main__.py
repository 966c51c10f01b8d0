"""`python -m tfkube`: the same as the `tfkube` command."""

from tfkube.cli import main

main()
