"""Repository hygiene: one source of truth for dependencies, and a README that stays true."""

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_environment_yml_only_installs_the_project() -> None:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_entries = [d for d in env["dependencies"] if isinstance(d, dict)]
    conda_entries = sorted(d.split("=")[0] for d in env["dependencies"] if isinstance(d, str))
    assert conda_entries == ["pip", "python"]
    assert pip_entries == [{"pip": ["-e .[course,test]"]}]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {"course", "test"} <= set(extras)


def test_python_versions_agree() -> None:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    minor = tuple(int(x) for x in python.split("=")[1].split("."))
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert minor >= tuple(int(x) for x in re.search(r">=\s*([\d.]+)", requires).group(1).split("."))


def test_torch_is_pinned() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "torch==2.13.0" in deps


def test_readme_lists_every_notebook_and_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert nb.name in readme, f"README syllabus misses {nb.name}"
    assert "make lab" in readme and "make test" in readme


def test_ci_runs_the_readme_test_command() -> None:
    assert "make test" in (ROOT / ".ci" / "run").read_text()


DOCS = ["glossary", "formulas", "reading", "speed", "instructors", "maintainers"]


def test_readme_is_a_landing_page() -> None:
    """At most 1,200 words (as `wc -w` counts them), "Start here" with the clone and the two
    commands on its first screen, and every docs page one link away."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split()) <= 1200, f"README.md has {len(readme.split())} words"
    first_screen = "\n".join(readme.splitlines()[:40])
    assert "## Start here" in first_screen
    for command in ("git clone https://github.com/", "make lab", "make test"):
        assert command in first_screen, command
    assert "workshop/00_" in first_screen and "notebooks/00_" in first_screen
    for name in DOCS:
        assert f"](docs/{name}.md" in readme, f"README does not link docs/{name}.md"
    assert "](data/models/README.md)" in readme


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown page."""
    anchors = set()
    for line in markdown.splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading[1].replace("`", "").strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    pages = [ROOT / "README.md", ROOT / "data" / "models" / "README.md"]
    pages += sorted((ROOT / "docs").glob("*.md"))
    checked = 0
    for page in pages:
        for href in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", href):
                continue
            path, _, anchor = href.partition("#")
            target = (page.parent / path).resolve() if path else page
            assert target.exists(), f"{page.relative_to(ROOT)} links {href}: no such file"
            if anchor and target.suffix == ".md":
                assert anchor in github_anchors(target.read_text()), (
                    f"{page.relative_to(ROOT)} links {href}: no such heading"
                )
            checked += 1
    assert checked >= 30


def test_the_shipped_models_fit_their_cap() -> None:
    """data/models/ (what a clone downloads; the resumable training states are git-ignored)
    stays within 80 MB."""
    shipped = [
        f for f in (ROOT / "data" / "models").rglob("*") if f.is_file() and f.suffix != ".pt"
    ]
    total = sum(f.stat().st_size for f in shipped)
    assert shipped and total <= 80e6, f"{total / 1e6:.1f} MB in data/models/"
