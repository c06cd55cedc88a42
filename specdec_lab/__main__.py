"""`python -m specdec_lab <command>`: demo, bench and train."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m specdec_lab", description=__doc__)
    parser.add_argument("command", choices=["demo", "bench", "train"])
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    command, rest = parser.parse_args(argv[:1]).command, argv[1:]
    if command == "demo":
        from specdec_lab.demo import main as run
    elif command == "bench":
        from specdec_lab.bench import main as run
    else:
        from specdec_lab.train import main as run
    from specdec_lab.models import PairUnavailableError, is_out_of_memory

    try:
        return run(rest)
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
