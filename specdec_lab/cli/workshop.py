"""`python -m specdec_lab workshop`: regenerate, check or list the student notebooks."""

from __future__ import annotations

import argparse
import sys

from specdec_lab.course import exercises


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_lab workshop", description=exercises.__doc__.splitlines()[0]
    )
    parser.add_argument("--src", default="notebooks", help="solution notebooks (%(default)s)")
    parser.add_argument("--out", default="workshop", help="student notebooks (%(default)s)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if --out is out of date")
    mode.add_argument("--list", action="store_true", help="print the exercises as a table")
    args = parser.parse_args(argv)
    try:
        if args.list:
            print(exercises.exercise_table(exercises.list_exercises(args.src)))
            return 0
        if args.check:
            problems = exercises.differences(args.src, args.out)
            for line in problems:
                print(line, file=sys.stderr)
            if problems:
                print("run `make workshop` to regenerate the student notebooks", file=sys.stderr)
            return 1 if problems else 0
        written = exercises.generate(args.src, args.out)
    except exercises.ExerciseError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(f"{args.out}/ is up to date")
    return 0
