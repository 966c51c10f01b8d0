"""`python -m tfkube`: the same as the `tfkube` command."""

from tfkube._entry import main

main()
