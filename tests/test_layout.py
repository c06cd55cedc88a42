"""The package's rooms and the one direction of its imports, read from the code's own imports.

A module may import from its own room and from the rooms listed before it, never after; the
package's modules import each other only at module level (no hidden import inside a function),
never a private name of another module, and the import graph has no cycle. The order is the map
in `specdec_lab/__init__.py`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import specdec_lab

PACKAGE = Path(specdec_lab.__file__).parent

ROOMS: list[tuple[str, set[str]]] = [
    ("foundation", {"env", "data", "theory", "sampling"}),
    ("engine", {"engine"}),
    ("algorithm", {"verify", "inputs", "drafters", "decoding", "tree", "heads"}),
    ("proof", {"proof"}),
    ("display", {"display"}),
    ("models", {"models"}),
    ("measure", {"measure"}),
    ("course", {"course"}),
    ("cli", {"cli", "__main__"}),
]
RANK = {top: rank for rank, (_, tops) in enumerate(ROOMS) for top in tops}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def rank(module: str) -> int | None:
    """The room of `specdec_lab.<top>...`; None for the package itself."""
    parts = module.split(".")
    return RANK[parts[1]] if len(parts) > 1 else None


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


def edges() -> dict[str, set[str]]:
    """Module -> the package modules it imports (`from pkg import mod` counts as pkg.mod)."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for module, names, _ in package_imports(path):
            targets = {f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES}
            graph[name] |= targets or {module}
    return graph


def test_every_module_lives_in_a_room() -> None:
    unplaced = [m for m in MODULES if m != "specdec_lab" and m.split(".")[1] not in RANK]
    assert not unplaced, f"add these to a room in ROOMS and to the map: {unplaced}"


def test_the_package_docstring_is_the_map() -> None:
    doc = specdec_lab.__doc__
    for _, tops in ROOMS:
        for top in tops - {"__main__", "inputs"}:
            assert top in doc, f"the map in specdec_lab/__init__.py does not name {top!r}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name: str) -> None:
    mine = rank(name)
    for target in edges()[name]:
        theirs = rank(target)
        assert theirs is None or mine is None or theirs <= mine, (
            f"{name} ({ROOMS[mine][0]}) imports {target} ({ROOMS[theirs][0]}), a room above it"
        )


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


def test_the_checks_have_power(tmp_path, monkeypatch) -> None:
    """The layering check rejects a function-level import, a private name and an upward edge."""
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
    assert rank("specdec_lab.measure.bench") > rank("specdec_lab.verify")
