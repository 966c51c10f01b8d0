"""`python -m tfkube`: the same as the `tfkube` command."""

from tfkube._main import main

main()
