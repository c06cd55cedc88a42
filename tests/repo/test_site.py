"""`make site`: the static site builds from executed notebooks, with navigation and plots."""

import importlib.util
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

ROOT = Path(__file__).resolve().parents[2]
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def load_builder():
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "scripts" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def links(html: str) -> list[tuple[str | None, str]]:
    """(rel, href) of every <a> of `html`."""
    found = []

    class Links(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "a":
                found.append((dict(attrs).get("rel"), dict(attrs).get("href")))

    Links().feed(html)
    return found


def executed_notebook(title: str, learn: str, plot: bool) -> nbformat.NotebookNode:
    cell = new_code_cell("plt.plot([1, 2]); plt.show()", execution_count=1)
    if plot:
        cell.outputs = [new_output("display_data", data={"image/png": PNG, "text/plain": "<Fig>"})]
    return new_notebook(
        cells=[
            new_markdown_cell(f"# {title}\n\nIntro.\n\n## You will learn\n\n- {learn}\n\n## 1. Go"),
            cell,
            new_markdown_cell("### Exercise 7: a tiny one"),
            new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
        ]
    )


def test_site_has_a_landing_page_navigation_and_embedded_plots(tmp_path: Path) -> None:
    src, out = tmp_path / "notebooks", tmp_path / "_site"
    src.mkdir()
    first = executed_notebook("00 · First steps", "the first thing", plot=True)
    nbformat.write(first, src / "00_first.ipynb")
    second = executed_notebook("01 · Second steps", "the second thing", plot=False)
    second.cells = second.cells[:2]
    nbformat.write(second, src / "01_second.ipynb")
    readme = tmp_path / "README.md"
    readme.write_text("# the course\n\nSpeculative **decoding**, proved.\n\n## Later\n\nnot here\n")
    before = (src / "00_first.ipynb").read_text()

    pages = load_builder().build_site(src, out, run=False, readme=readme)

    assert [p.href for p in pages] == ["00_first.html", "01_second.html"]
    index = (out / "index.html").read_text()
    assert "<strong>decoding</strong>" in index and "not here" not in index
    assert {(None, "00_first.html"), (None, "01_second.html")} <= set(links(index))
    assert "00 · First steps</a>" in index and "01 · Second steps</a>" in index
    assert "<li>the first thing</li>" in index and "<li>the second thing</li>" in index
    assert "a tiny one" in index  # the exercise table

    one, two = (out / "00_first.html").read_text(), (out / "01_second.html").read_text()
    for page in (one, two):
        assert links(page).count((None, "index.html")) == 2  # navigation above and below
        assert 'href="style.css"' in page
    assert links(one).count(("next", "01_second.html")) == 2 and "prev" not in dict(links(one))
    assert links(two).count(("prev", "00_first.html")) == 2 and "next" not in dict(links(two))
    assert re.search(r'<img[^>]+src="data:image/png;base64,' + re.escape(PNG[:20]), one)
    assert (out / "style.css").exists() and (out / "notebooks" / "00_first.ipynb").exists()
    assert (src / "00_first.ipynb").read_text() == before  # the sources are never rewritten

    load_builder().build_site(src, out, run=False, readme=readme, only=["01"])  # rebuilds in place
    assert not (out / "00_first.html").exists() and (out / "01_second.html").exists()


def test_docs_pages_are_built_with_their_links_pointed_at_the_site(tmp_path: Path) -> None:
    src, out, docs = tmp_path / "notebooks", tmp_path / "_site", tmp_path / "docs"
    src.mkdir()
    docs.mkdir()
    first = executed_notebook("00 · First steps", "the first thing", plot=False)
    first.cells.insert(0, new_code_cell('REPO_URL = "https://github.com/someone/course"'))
    nbformat.write(first, src / "00_first.ipynb")
    (docs / "glossary.md").write_text(
        "# Glossary\n\n## The term\n\n**α.** See [notebook 00](../notebooks/00_first.ipynb), the "
        "[sheet](formulas.md#the-speedup), [the code](../specdec_lab/theory.py), "
        "[home](../README.md) and [a paper](https://arxiv.org/abs/2211.17192).\n"
    )
    (docs / "formulas.md").write_text("# Formula sheet\n\n## The speedup\n\n$$s = 1$$\n")
    readme = tmp_path / "README.md"
    readme.write_text("# the course\n\nIntro.\n\n## Start here\n\n[glossary](docs/glossary.md)\n")

    load_builder().build_site(src, out, run=False, readme=readme)

    index = (out / "index.html").read_text()
    assert {(None, "docs/glossary.html"), (None, "docs/formulas.html")} <= set(links(index))
    assert "Formula sheet</a>" in index
    glossary = (out / "docs" / "glossary.html").read_text()
    hrefs = {href for _, href in links(glossary)}
    for href in (
        "../00_first.html",
        "formulas.html#the-speedup",
        "https://github.com/someone/course/blob/main/specdec_lab/theory.py",
        "../index.html",
        "https://arxiv.org/abs/2211.17192",
    ):
        assert href in hrefs, href
    formulas = (out / "docs" / "formulas.html").read_text()
    assert '<a id="the-speedup"></a>' in formulas  # GitHub's anchor, beside nbconvert's id
    assert "$$s = 1$$" in formulas and 'href="../style.css"' in formulas


def test_github_slugs_match_githubs_anchors() -> None:
    builder = load_builder()
    assert builder.github_slug("Binder and Colab") == "binder-and-colab"
    assert builder.github_slug("The <code>head</code>: 0.66 M, γ = 4") == "the-head-066-m-γ--4"
