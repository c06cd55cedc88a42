"""Where the course is published: one repository URL everywhere, and a site workflow that builds it."""

import re
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]
REPO = "specdec-lab/specdec-lab"  # the one documented value (README, "Where the course lives")


def test_every_colab_cell_clones_the_documented_repository() -> None:
    for folder in ("notebooks", "workshop"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            sources = [c.source for c in nbformat.read(path, 4).cells if c.cell_type == "code"]
            urls = [m for s in sources for m in re.findall(r'REPO_URL = "([^"]+)"', s)]
            assert urls == [f"https://github.com/{REPO}"], f"{path.name}: REPO_URL {urls}"


def test_readme_links_use_the_documented_repository() -> None:
    for page in ("README.md", "docs/instructors.md"):
        text = (ROOT / page).read_text()
        assert "<owner>" not in text
        for host in ("mybinder.org/v2/gh/", "colab.research.google.com/github/"):
            links = re.findall(re.escape(host) + r"([\w.-]+/[\w.-]+)", text)
            assert links and set(links) == {REPO}, (page, host, links)
        assert ".github/workflows/site.yml" in text, page
    clone = re.findall(
        r"git clone https://github.com/([\w.-]+/[\w.-]+?)(?:\.git)?\s", readme_text()
    )
    assert clone == [REPO]


def readme_text() -> str:
    return (ROOT / "README.md").read_text()


def test_site_workflow_builds_make_site_and_deploys_it_to_pages() -> None:
    workflow = yaml.safe_load((ROOT / ".github/workflows/site.yml").read_text())
    build = workflow["jobs"]["build"]["steps"]
    assert any(step.get("run") == "make site" for step in build)
    upload = [s for s in build if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert upload and upload[0]["with"]["path"] == "_site"
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert deploy["steps"][0]["uses"].startswith("actions/deploy-pages")
    assert workflow["permissions"]["pages"] == "write"
