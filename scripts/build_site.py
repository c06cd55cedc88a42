"""Build the course as a static HTML site in _site/ (`make site`).

Every notebook of notebooks/ is executed in order, on the CPU and offline, in memory: the stripped
notebooks of the repository are never rewritten. nbconvert's HTMLExporter turns each one into a
self-contained page (plots embedded as data URIs) with prev / index / next navigation. The landing
page holds the introduction of README.md, a syllabus read from the notebooks (title and "You will
learn" list), the exercise table and the reference pages: every docs/*.md (glossary, formula
sheet, ...) becomes docs/<name>.html, its links to notebooks and to other docs pages pointed at
the site's own pages and its links to other repository files at the repository on GitHub
(`REPO_URL` of the notebooks). Page templates and CSS live in site/.

    python scripts/build_site.py                 # execute and build everything
    python scripts/build_site.py --only 00 04    # a subset (navigation covers the subset)
    python scripts/build_site.py --no-execute    # render the notebooks as they are stored
"""

from __future__ import annotations

import argparse
import datetime
import html as html_lib
import os
import posixpath
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import jinja2
import nbformat
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune

ROOT = Path(__file__).resolve().parents[1]
SITE_SOURCES = ROOT / "site"
MARKER = ".specdec-site"  # marks a directory this script built, and so may delete


@dataclass
class Page:
    source: Path
    title: str
    learn: str  # HTML of the notebook's "You will learn" list
    error: str | None = None  # set when the notebook stopped with an error while executing

    @property
    def number(self) -> str:
        return self.source.name.split("_", 1)[0]

    @property
    def href(self) -> str:
        return self.source.stem + ".html"


@dataclass
class DocPage:
    source: Path  # docs/<name>.md
    title: str

    @property
    def href(self) -> str:  # relative to the site root
        return f"docs/{self.source.stem}.html"


def doc_pages(docs_dir: Path) -> list[DocPage]:
    """Every markdown page of `docs_dir`, titled by its first ``# `` heading."""
    pages = []
    for path in sorted(docs_dir.glob("*.md")) if docs_dir.is_dir() else []:
        lines = path.read_text(encoding="utf-8").splitlines()
        title = next((x[2:].strip() for x in lines if x.startswith("# ")), path.stem)
        pages.append(DocPage(path, title))
    return pages


def repo_url(notebooks: list[nbformat.NotebookNode]) -> str | None:
    """The repository the notebooks' Colab cell clones (`REPO_URL = "..."`), or None."""
    for nb in notebooks:
        for cell in nb.cells:
            found = (
                re.search(r'REPO_URL = "([^"]+)"', cell.source)
                if cell.cell_type == "code"
                else None
            )
            if found:
                return found[1].rstrip("/")
    return None


def github_slug(heading_html: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", heading_html)).replace("\u00b6", "").strip()
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def github_anchors(html: str) -> str:
    """Give every heading the anchor GitHub would give it too, so that links written for GitHub
    (``page.md#the-agenda``) land on the site as well (nbconvert's ids keep the case)."""

    def add(match: re.Match) -> str:
        slug = github_slug(match[3])
        return match[0] if slug == match[2] else f'<a id="{slug}"></a>{match[0]}'

    return re.sub(r'<h([1-6]) id="([^"]*)">(.*?)</h\1>', add, html, flags=re.DOTALL)


def site_links(
    html: str,
    source_dir: str,
    page_dir: str,
    site_paths: dict[str, str],
    repository: str | None,
) -> str:
    """Point the relative links of `html` (markdown from `source_dir`, repository-relative, shown
    at `page_dir` of the site) at the site: a file the site renders (`site_paths`, repository
    path -> site path) links to its page, any other repository file to `repository` on GitHub."""

    def point(match: re.Match) -> str:
        href = match[1]
        if re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", href):
            return match[0]  # absolute, or an anchor on the same page
        path, hash_, fragment = href.partition("#")
        target = posixpath.normpath(posixpath.join(source_dir, path)) if path else ""
        if target in site_paths:
            new = posixpath.relpath(site_paths[target], page_dir or ".")
        elif repository and target and not target.startswith(".."):
            new = f"{repository}/blob/main/{target}"
        else:
            return match[0]
        return f'href="{new}{hash_}{fragment}"'

    return re.sub(r'href="([^"]*)"', point, html)


def markdown(text: str) -> str:
    """HTML of notebook-flavoured markdown; $...$ math is left for MathJax, as on the pages."""
    return markdown2html_mistune(text)


def notebook_page(nb: nbformat.NotebookNode, source: Path) -> Page:
    """Title (the first ``# `` heading) and "You will learn" list of a course notebook."""
    title, learn = None, None
    for cell in nb.cells:
        lines = cell.source.splitlines() if cell.cell_type == "markdown" else []
        title = title or next((x[2:].strip() for x in lines if x.startswith("# ")), None)
        for i, line in enumerate(lines):
            if learn is None and re.match(r"#+\s*you will learn", line, re.IGNORECASE):
                rest = lines[i + 1 :]
                end = next((j for j, x in enumerate(rest) if x.startswith("#")), len(rest))
                learn = "\n".join(rest[:end]).strip()  # up to the next heading of that cell
    return Page(source, title or source.stem, markdown(learn or ""))


def readme_intro(readme: Path) -> tuple[str, str]:
    """(title, HTML) of README.md: its ``# `` heading and the text before the first ``## ``."""
    text = readme.read_text(encoding="utf-8") if readme.exists() else "# specdec-lab\n"
    title, _, rest = text.partition("\n")
    intro = re.split(r"^## ", rest, maxsplit=1, flags=re.MULTILINE)[0]
    return title.lstrip("# ").strip(), markdown(intro.strip())


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout: int) -> str | None:
    """Run `nb` in place in a fresh kernel of this Python; the error's summary, or None."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    client = NotebookClient(
        nb, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute()
    except CellExecutionError as err:
        return f"{err.ename}: {err.evalue}"
    return None


def prepare_output(out_dir: Path) -> None:
    """Empty `out_dir` if this script built it; refuse to touch any other non-empty directory."""
    if (out_dir / MARKER).exists():
        shutil.rmtree(out_dir)
    elif out_dir.exists() and any(out_dir.iterdir()):
        raise SystemExit(
            f"{out_dir} is not empty and was not built by this script: not touching it"
        )
    (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    (out_dir / MARKER).touch()
    (out_dir / ".nojekyll").touch()  # GitHub Pages: serve the files as they are
    shutil.copy(SITE_SOURCES / "style.css", out_dir / "style.css")


def build_site(
    src_dir: Path = ROOT / "notebooks",
    out_dir: Path = ROOT / "_site",
    *,
    run: bool = True,
    only: list[str] | None = None,
    readme: Path = ROOT / "README.md",
    timeout: int = 900,
    docs_dir: Path | None = None,
) -> list[Page]:
    """Build the site of the notebooks of `src_dir` into `out_dir`; returns the pages.

    `run=False` renders the notebooks as they are stored (already executed, or without outputs).
    `only` keeps the notebooks whose name starts with one of its prefixes. `docs_dir` (default:
    the docs/ beside `readme`) holds the markdown reference pages.
    """
    from specdec_lab.course.exercises import list_exercises

    sources = sorted(src_dir.glob("*.ipynb"))
    if only:
        sources = [p for p in sources if p.name.startswith(tuple(only))]
    if not sources:
        raise SystemExit(f"no notebooks to build in {src_dir}")
    prepare_output(out_dir)

    notebooks = [nbformat.read(path, as_version=4) for path in sources]
    pages = [notebook_page(nb, path) for nb, path in zip(notebooks, sources, strict=True)]
    exporter = HTMLExporter(
        template_name="specdec",
        extra_template_basedirs=[str(SITE_SOURCES / "templates")],
        embed_images=True,  # markdown images too; output plots are data URIs anyway
    )
    for i, (nb, page) in enumerate(zip(notebooks, pages, strict=True)):
        shutil.copy(page.source, out_dir / "notebooks" / page.source.name)  # stripped, as stored
        if run:
            start = time.perf_counter()
            page.error = execute(nb, src_dir, timeout)
            status = f"FAILED ({page.error})" if page.error else "ok"
            print(f"{page.source.name}: executed in {time.perf_counter() - start:.0f} s, {status}")
        nav = {
            "prev": pages[i - 1] if i > 0 else None,
            "next": pages[i + 1] if i + 1 < len(pages) else None,
            "download": f"notebooks/{page.source.name}",
            "error": page.error,
        }
        resources = {"metadata": {"name": page.title, "path": str(src_dir)}, "specdec": nav}
        html, _ = exporter.from_notebook_node(nb, resources=resources)
        (out_dir / page.href).write_text(html, encoding="utf-8")

    by_name = {page.source.name: page for page in pages}
    exercise_rows = [
        {"number": n, "title": t, "href": by_name[nb].href, "page_title": by_name[nb].title}
        for n, t, nb in list_exercises(src_dir)
        if nb in by_name
    ]
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(SITE_SOURCES / "templates"), autoescape=False
    )
    docs = doc_pages(docs_dir if docs_dir is not None else readme.parent / "docs")
    site_paths = {f"{src_dir.name}/{page.source.name}": page.href for page in pages}
    site_paths |= {f"docs/{doc.source.name}": doc.href for doc in docs}
    site_paths["README.md"] = "index.html"
    repository = repo_url(notebooks)
    if docs:
        (out_dir / "docs").mkdir(exist_ok=True)
    for doc in docs:
        body = markdown(doc.source.read_text(encoding="utf-8"))
        body = github_anchors(site_links(body, "docs", "docs", site_paths, repository))
        (out_dir / doc.href).write_text(
            templates.get_template("doc.html.j2").render(
                title=doc.title, body=body, docs=docs, mathjax_url=exporter.mathjax_url
            ),
            encoding="utf-8",
        )

    title, intro = readme_intro(readme)
    intro = site_links(intro, "", "", site_paths, repository)
    landing = templates.get_template("landing.html.j2")
    (out_dir / "index.html").write_text(
        landing.render(
            title=title,
            intro=intro,
            pages=pages,
            exercises=exercise_rows,
            docs=docs,
            device=f"a {os.cpu_count()}-core CPU" if run else "the machine that stored them",
            built=datetime.date.today().isoformat(),
            mathjax_url=exporter.mathjax_url,
        ),
        encoding="utf-8",
    )
    return pages


def offline_cpu_environment(gpu: bool) -> None:
    """Environment of the kernels: no hub downloads, and no GPU unless asked for."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    if not gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--out", type=Path, default=ROOT / "_site")
    parser.add_argument("--only", nargs="+", metavar="PREFIX", help="e.g. --only 00 04")
    parser.add_argument("--no-execute", action="store_true", help="render notebooks as stored")
    parser.add_argument("--gpu", action="store_true", help="let the notebooks see a GPU")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args(argv)

    offline_cpu_environment(args.gpu)
    start = time.perf_counter()
    pages = build_site(
        args.src, args.out, run=not args.no_execute, only=args.only, timeout=args.timeout
    )
    print(f"built {len(pages)} pages into {args.out} in {time.perf_counter() - start:.0f} s")
    failed = [page.source.name for page in pages if page.error]
    if failed:
        print(f"these notebooks stopped with an error: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
