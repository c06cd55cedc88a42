"""Command-line tools: argparse and printing only, each a `main(argv) -> int` that
`python -m specdec_lab <command>` dispatches to (see `specdec_lab.__main__`).

May import: everything.
"""
