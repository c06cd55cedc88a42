"""The package's rooms and what each may import, read from the map and from the rooms' own lines.

The map in `specdec_lab/__init__.py` places every module in a room. Each room names, on its one
line "May import: ...", the rooms its modules may import besides each other (a package in its
own docstring; the foundation and the algorithm, rooms of plain modules, below the map). Every
import inside the package is checked against the importing room's own line: a partial order, so
`measure` may import `display` while `models`, though listed after `display`, may not. The lines
must agree with the map's order too (a room names only rooms above it). Besides: the package's
modules import each other only at module level (no hidden import inside a function), never a
private name of another module, and the import graph has no cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import specdec_lab

PACKAGE = Path(specdec_lab.__file__).parent
MAP_DOC = specdec_lab.__doc__


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
TOPS = {name.split(".")[1] for name in MODULES if name != "specdec_lab"}


def top(module: str) -> str | None:
    """`env` for `specdec_lab.env`, `engine` for `specdec_lab.engine.fused`; None for the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def read_map(doc: str) -> dict[str, list[str]]:
    """Room -> its top-level modules and packages, in the map's order, from the package docstring.

    The map is the first indented block after "The map". A row `name/` is a package room; a row
    `the <room>   <module>   ...` opens a room of plain modules, and each following row that
    starts with a module name (then two spaces, in the same column) adds one. `__main__` belongs
    to the cli room, whose tools it runs.
    """
    lines = doc.split("The map", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    rooms: dict[str, list[str]] = {}
    group = None
    for line in lines[start:]:
        if not line.strip():
            break
        label, first = line[4:21].strip(), re.match(r"(\w+) {2,}\S", line[21:])
        if label.endswith("/"):
            group = None
            rooms[label[:-1]] = [label[:-1]]
        elif label:
            assert label.startswith("the ") and first, f"unreadable row of the map: {line!r}"
            group = label.removeprefix("the ")
            rooms[group] = [first[1]]
        elif group and first:
            rooms[group].append(first[1])
    rooms.setdefault("cli", []).append("__main__")
    return rooms


MAP = read_map(MAP_DOC)
ROOM_OF = {name: room for room, names in MAP.items() for name in names}

LINE = re.compile(r"May import:\s*(.*?)\s*(?:;|\.(?=\s|$))", re.S)


def read_line(text: str, rooms: dict[str, list[str]] = MAP) -> set[str]:
    """The top-level names that the words of a "May import" line allow.

    "the algorithm, the engine and the foundation (`env`, `data`)" allows every module of the
    algorithm and the engine, and `env` and `data` of the foundation; "everything but `cli`" all
    but the cli; "nothing" nothing. A room or a single module may be named; a word that is
    neither (nor "the", "and", "everything", "but") is an error, so a line cannot drift into
    prose the check would silently misread.
    """
    if text.strip() == "nothing":
        return set()
    allowed: set[str] = set()
    last, but = None, False
    for paren, word in re.findall(r"\(([^)]*)\)|(\w+)", text):
        if paren:  # `the foundation (`env`, `data`)`: only these modules of the room just named
            names = set(re.findall(r"\w+", paren))
            if last is None or but or not names <= set(rooms[last]):
                raise ValueError(f"{paren!r} must name modules of the room before it, in {text!r}")
            allowed -= set(rooms[last]) - names
            continue
        last = None
        if word in ("the", "and"):
            continue
        if word == "but":
            but = True
            continue
        if word == "everything":
            names = {name for names in rooms.values() for name in names}
        elif word in rooms:
            names, last = set(rooms[word]), word
        elif any(word in names for names in rooms.values()):
            names = {word}
        else:
            raise ValueError(f"{word!r} is neither a room nor a module of the map, in {text!r}")
        allowed = allowed - names if but else allowed | names
    return allowed


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def room_lines() -> dict[str, list[str]]:
    """Room -> the "May import" lines it states: a package in its docstring, a room of plain
    modules on its row below the map (`    the <room>   May import: ...`)."""
    lines = {}
    for room in MAP:
        init = PACKAGE / room / "__init__.py"
        if init.exists():
            lines[room] = LINE.findall(docstring(init))
        else:
            rows = re.findall(rf"^    the {room} +(May import:.*)$", MAP_DOC, re.M)
            lines[room] = [m for row in rows for m in LINE.findall(row)]
    return lines


def read_rules() -> dict[str, set[str]]:
    """Room -> the top-level names its own line allows (its own room is always allowed)."""
    return {room: read_line(found[0]) for room, found in room_lines().items() if found}


def package_imports(path: Path) -> list[tuple[str, list[str], bool]]:
    """(imported module, imported names, at module level?) for every specdec_lab import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = set(map(id, tree.body))
    for node in tree.body:  # `if TYPE_CHECKING:` blocks are module level too
        if isinstance(node, ast.If):
            top_level |= set(map(id, node.body))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "specdec_lab":
                names = [a.name for a in node.names]
                found.append((node.module, names, id(node) in top_level))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "specdec_lab":
                    found.append((alias.name, [], id(node) in top_level))
    return found


def edges(modules: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    """Module -> the package modules it imports (`from pkg import mod` counts as pkg.mod)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for module, names, _ in package_imports(path):
            targets = {f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES}
            graph[name] |= targets or {module}
    return graph


def violations(graph: dict[str, set[str]], rules: dict[str, set[str]]) -> list[str]:
    """Every edge of `graph` (module -> modules it imports) that the importer's room's own line
    does not allow. A room's modules may always import each other; the package itself (its
    `__init__`) is in no room."""
    found = []
    for module, targets in sorted(graph.items()):
        mine = top(module)
        if mine is None:
            continue
        room = ROOM_OF.get(mine)
        for target in sorted(targets):
            theirs = top(target)
            if theirs is None or ROOM_OF.get(theirs) == room or theirs in rules.get(room, ()):
                continue
            found.append(
                f"{module} ({room}) imports {target} ({ROOM_OF.get(theirs)}), which the {room} "
                "room's line 'May import: ...' does not name"
            )
    return found


def test_every_module_lives_in_a_room() -> None:
    unplaced = sorted(TOPS - set(ROOM_OF))
    assert not unplaced, f"place these in the map in specdec_lab/__init__.py: {unplaced}"
    unknown = sorted(set(ROOM_OF) - TOPS)
    assert not unknown, f"the map names modules that do not exist: {unknown}"
    twice = [name for room, names in MAP.items() for name in names if ROOM_OF[name] != room]
    assert not twice, f"the map places these in two rooms: {twice}"


def test_every_room_states_one_line() -> None:
    for room, found in room_lines().items():
        assert len(found) == 1, f"the {room} room states {len(found)} 'May import' lines, not one"


def test_the_lines_follow_the_order_of_the_map() -> None:
    """The map's order stays one in which every room imports only rooms above it."""
    order = list(MAP)
    for room, allowed in read_rules().items():
        below = sorted(
            n for n in allowed if order.index(ROOM_OF[n]) > order.index(room) and n not in MAP[room]
        )
        assert not below, f"the {room} room may import {below}, below it in the map: reorder"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_follow_the_rooms_lines(name: str) -> None:
    found = violations({name: edges()[name]}, read_rules())
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_hidden_or_private_imports(name: str) -> None:
    for module, names, at_top in package_imports(MODULES[name]):
        assert at_top, f"{name} imports {module} inside a function: import it at the top"
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        assert not private, f"{name} imports the private {private} of {module}"
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specdec_lab")
        for alias in node.names
    }
    reached = [
        f"{node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in imported
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    ]
    assert not reached, f"{name} reaches into private names of other modules: {reached}"


def test_no_import_cycle() -> None:
    graph, state, stack = edges(), {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_checks_have_power(tmp_path) -> None:
    """The checks reject a function-level import, a private name, and an import that its room's
    line does not name, even one the map's order alone would let through (models -> display)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from specdec_lab.measure import bench\n"
        "from specdec_lab.verify import _secret\n"
        "def f():\n    from specdec_lab import env\n"
    )
    found = package_imports(bad)
    assert [(m, at_top) for m, _, at_top in found] == [
        ("specdec_lab.measure", True),
        ("specdec_lab.verify", True),
        ("specdec_lab", False),
    ]
    assert found[1][1] == ["_secret"]

    rules = read_rules()
    fake = tmp_path / "fake.py"
    fake.write_text(
        "from specdec_lab.display import trace\n"
        "from specdec_lab.engine import sessions\n"
        "from specdec_lab.models.memory import check_fits\n"
    )
    graph = edges({"specdec_lab.models.fake": fake})
    assert graph == {
        "specdec_lab.models.fake": {
            "specdec_lab.display",
            "specdec_lab.engine.sessions",
            "specdec_lab.models.memory",
        }
    }
    assert list(MAP).index("display") < list(MAP).index("models")  # the order alone allows it
    assert violations(graph, rules) == [
        "specdec_lab.models.fake (models) imports specdec_lab.display (display), which the models "
        "room's line 'May import: ...' does not name"
    ]
    assert violations({"specdec_lab.measure.bench": {"specdec_lab.display.traces"}}, rules) == []
    assert violations({"specdec_lab.engine.fused": {"specdec_lab.theory"}}, rules)  # (env, ...)
    assert violations({"specdec_lab.env": {"specdec_lab.engine.sessions"}}, rules)  # nothing


def test_the_lines_are_read_word_for_word() -> None:
    algorithm = set(MAP["algorithm"])
    assert "inputs" in algorithm and "verify" in algorithm
    assert read_line("the algorithm, the engine and the foundation (`env`, `data`)") == (
        algorithm | {"engine", "env", "data"}
    )
    assert read_line("everything but `cli`") == set(ROOM_OF) - {"cli", "__main__"}
    assert read_line("nothing") == set()
    assert read_line("`proof`, `display` and `models`") == {"proof", "display", "models"}
    with pytest.raises(ValueError, match="neither a room nor a module"):
        read_line("the algorithm and everything below it")
    with pytest.raises(ValueError, match="modules of the room"):
        read_line("the engine (`env`)")
    assert LINE.findall("May import: the engine; nothing above it.") == ["the engine"]
    assert LINE.findall("May import: the algorithm, the engine and\nthe foundation.\n") == [
        "the algorithm, the engine and\nthe foundation"
    ]
