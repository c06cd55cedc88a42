"""What the checks of every notebook share: three rules, and the tools that enforce them.

- **No delegation.** An exercise that re-implements a library function fails when the answer
  calls that function (`refuse_delegation`).
- **Predict, then measure.** A prediction the learner stores (``prediction_1_3 = ...``) is
  validated in form only (`require_prediction`), then printed next to the measurement: a wrong
  prediction is not an error, it is what the measurement is for.
- **A stub is not an answer.** A prediction left at ``None`` raises ``NotImplementedError``, as
  the stubs of the student notebooks do, after the answer's function has been checked.

`call_answer` runs an answer and reports any error it raises as a wrong answer.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import Any


def source_names(obj: Any) -> set[str]:
    """Every name and attribute that the source of `obj` (a function or class) mentions, not in
    strings or comments; empty when the source is not available. For a class (whose source in a
    notebook cannot be read): the names of its methods' sources and of its base classes."""
    if inspect.isclass(obj):
        names = {base.__name__ for base in obj.__mro__[1:]}
        for member in vars(obj).values():
            if inspect.isfunction(member):
                names |= source_names(member)
        return names
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return set()
    try:
        tree = ast.parse(source)
    except SyntaxError:  # e.g. a lambda cut out of a larger expression: fall back to words
        return set(re.findall(r"[A-Za-z_]\w*", source))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


class refuse_delegation:  # noqa: N801 (used like a function: `with refuse_delegation(...):`)
    """Fail Exercise `exercise` if `answer` calls a library function it is meant to re-implement.

    `forbidden` maps a name to ``(owner, attribute)``, or to ``None`` (only the answer's source is
    read for the name). Each ``with guard:`` block replaces ``owner.attribute`` by a function that
    raises, catching an indirect call too: run only the answer inside it. `task` ends the sentence
    "write <task> yourself"."""

    def __init__(
        self, exercise: str, answer: Any, forbidden: dict[str, tuple[Any, str] | None], task: str
    ) -> None:
        self.exercise, self.forbidden, self.task = exercise, forbidden, task
        self.patched: list[tuple[Any, str, Any]] = []
        used = sorted(source_names(answer) & set(forbidden))
        if used:
            raise AssertionError(
                f"Exercise {exercise}: your answer calls {used[0]}, the library's version of what "
                f"this exercise asks for: write {task} yourself"
            )

    def _refuse(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(
                f"Exercise {self.exercise}: your answer calls {name} (perhaps through another "
                f"function), the library's version of what this exercise asks for: write "
                f"{self.task} yourself"
            )

        return call

    def __enter__(self) -> refuse_delegation:
        for name, target in self.forbidden.items():
            if target is not None:
                owner, attribute = target
                self.patched.append((owner, attribute, getattr(owner, attribute)))
                setattr(owner, attribute, self._refuse(name))
        return self

    def __exit__(self, *exc: Any) -> None:
        for owner, attribute, original in reversed(self.patched):
            setattr(owner, attribute, original)
        self.patched = []


def require_prediction(
    exercise: str, prediction: Any, choices: Iterable[Any] | None = None
) -> None:
    """NotImplementedError while the prediction is None; AssertionError if it is not a choice."""
    if prediction is None or prediction is Ellipsis:
        raise NotImplementedError(
            f"Exercise {exercise}: write your prediction into the prediction variable first"
        )
    if choices is None:
        if not isinstance(prediction, (int, float)) or isinstance(prediction, bool):
            raise AssertionError(f"Exercise {exercise}: your prediction must be a number")
        if not math.isfinite(prediction):
            raise AssertionError(f"Exercise {exercise}: your prediction must be a finite number")
        return
    choices = list(choices)
    if prediction not in choices:
        raise AssertionError(
            f"Exercise {exercise}: your prediction must be one of {choices}, got {prediction!r}"
        )


def call_answer(exercise: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args), with any error but AssertionError and NotImplementedError reported as wrong."""
    try:
        return fn(*args, **kwargs)
    except (AssertionError, NotImplementedError):
        raise
    except Exception as err:
        raise AssertionError(
            f"Exercise {exercise}: your answer raised {type(err).__name__}: {err}"
        ) from err
