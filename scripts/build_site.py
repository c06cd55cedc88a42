"""Build the course as a static HTML site in _site/ (`make site`).

Every notebook of notebooks/ is executed in order, on the CPU and offline, in memory: the stripped
notebooks of the repository are never rewritten. nbconvert's HTMLExporter turns each one into a
self-contained page (plots embedded as data URIs) with prev / index / next navigation. The landing
page holds the introduction of README.md, a syllabus read from the notebooks (title and "You will
learn" list) and the exercise table. Page templates and CSS live in site/.

    python scripts/build_site.py                 # execute and build everything
    python scripts/build_site.py --only 00 04    # a subset (navigation covers the subset)
    python scripts/build_site.py --no-execute    # render the notebooks as they are stored
"""

from __future__ import annotations

import argparse
import datetime
import os
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
) -> list[Page]:
    """Build the site of the notebooks of `src_dir` into `out_dir`; returns the pages.

    `run=False` renders the notebooks as they are stored (already executed, or without outputs).
    `only` keeps the notebooks whose name starts with one of its prefixes.
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
    title, intro = readme_intro(readme)
    landing = jinja2.Environment(
        loader=jinja2.FileSystemLoader(SITE_SOURCES / "templates"), autoescape=False
    ).get_template("landing.html.j2")
    (out_dir / "index.html").write_text(
        landing.render(
            title=title,
            intro=intro,
            pages=pages,
            exercises=exercise_rows,
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
