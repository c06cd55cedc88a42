"""The learner's first hour, in a real browser: `make lab`, then Run All in three notebooks.

`make browser-test` runs this script. It starts `make lab` on a free port with a random token,
opens notebooks 01 and 04 and the student notebook workshop/01 in Debian's headless Chromium
(driven by playwright), chooses Run > Run All Cells as a learner would, and checks:

- the server runs the notebooks' `python3` kernel from this .venv, and registers no other course
  kernel;
- the solution notebooks run to their last cell with no error output;
- notebook 04's interactive plot is a real plot when Run All ends (not a blank image), and moving
  a slider redraws it;
- the student notebook stops at a check cell that raises NotImplementedError (the first exercise
  stub), with no error before it;
- none of this writes to the notebooks (autosave is off in the test's own settings).

Screenshots and the server log go to _browser/ (git-ignored). `--runs-04 N` repeats notebook 04
in N fresh kernels and reports how many ended with a real plot; all N must.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from PIL import Image
from playwright.sync_api import Browser, Page, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from specdec_lab.course.exercises import CHECK_TAG

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "_browser"
CHROMIUM = "/usr/bin/chromium"  # Debian's package `chromium`; `make browser-test` installs it
# Flags for a root, offline, headless machine: without the background-networking ones Chromium
# keeps dialing hosts that a closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SOLUTIONS = ["notebooks/01_draft_and_verify.ipynb", "notebooks/04_speedup_theory.ipynb"]
STUDENT = "workshop/01_draft_and_verify.ipynb"
WIDGET_NOTEBOOK = "notebooks/04_speedup_theory.ipynb"
# A plot is "real" when more than this fraction of its pixels is not white. Axes, ticks and one
# curve already cover several percent; the blank image of the bug covers none.
MIN_INK = 0.01
RUN_ALL_TIMEOUT_S = 300
SETTLE_S = 3.0  # after Run All, how long the widget plot must stay real (late callbacks blanked it)

# JupyterLab user settings for the test: no autosave (Run All must not write outputs into the
# repository) and no news or update checks (the network is closed).
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}

# JavaScript run in the page, against the app that `--LabApp.expose_app_in_browser` exposes.
JS_CURRENT_NOTEBOOK = "() => { const w = window.jupyterapp?.shell.currentWidget; return w?.content?.model ? w : null; }"
JS_KERNEL_STATUS = f"""() => {{
  const w = ({JS_CURRENT_NOTEBOOK})();
  return w?.sessionContext?.session?.kernel?.status ?? null;
}}"""
# Cells queued or running ('*' prompts), read from the model: JupyterLab renders only the cells
# near the viewport, so counting '*' in the DOM missed queued cells further down (CI saw Run All
# "end" with notebook 01's last two cells still queued).
JS_BUSY_PROMPTS = f"""() => {{
  const w = ({JS_CURRENT_NOTEBOOK})();
  return w.content.widgets.filter(c => c.model.type === 'code' && c.model.executionState === 'running').length;
}}"""
JS_CELLS = f"""() => {{
  const w = ({JS_CURRENT_NOTEBOOK})();
  return w.content.widgets.map((cell, index) => ({{
    index,
    type: cell.model.type,
    source: cell.model.sharedModel.getSource(),
    tags: cell.model.getMetadata('tags') ?? [],
    execution_count: cell.model.type === 'code' ? cell.model.executionCount : null,
    outputs: cell.model.type === 'code' ? cell.model.outputs.toJSON() : [],
  }}));
}}"""
# Every cell with sliders, and the <img> of the plots in its widget Output.
JS_WIDGET_IMAGES = f"""() => {{
  const w = ({JS_CURRENT_NOTEBOOK})();
  const out = [];
  w.content.widgets.forEach((cell, index) => {{
    if (!cell.node.querySelector('.widget-slider')) return;
    const imgs = [...cell.node.querySelectorAll('.widget-output img')];
    out.push({{index, srcs: imgs.map(i => i.src)}});
  }});
  return out;
}}"""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def saved_outputs(path: Path) -> str:
    """A digest of the outputs stored in the notebook file: what an autosave would change (and
    what someone editing the notebook's cells meanwhile would not)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    outputs = [o for c in cells for o in c.get("outputs", [])]
    return hashlib.sha256(json.dumps(outputs, sort_keys=True).encode()).hexdigest()


class Lab:
    """`make lab` in the background, on a free port with a random token and test settings."""

    def __init__(self, settings_dir: Path) -> None:
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        args = [
            "--no-browser",
            "--ServerApp.port_retries=0",  # our free port, or fail: never a neighbour
            f"--LabApp.user_settings_dir={settings_dir / 'user-settings'}",
            f"--LabApp.workspaces_dir={settings_dir / 'workspaces'}",  # no restored layout
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to read cell outputs
        ]
        self.log_path = OUT / "lab.log"
        self.process = subprocess.Popen(
            [
                "make",
                "--no-print-directory",
                "lab",
                f"JUPYTER_PORT={self.port}",
                f"JUPYTER_TOKEN={self.token}",
                f"JUPYTER_ARGS={' '.join(args)}",
            ],
            cwd=ROOT,
            stdout=self.log_path.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # one process group: make, jupyter and its kernels
        )

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(
            f"{self.base}/api/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"`make lab` exited ({self.process.returncode}): {self.log_path}"
                )
            try:
                self.api("status")
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"JupyterLab did not answer in {timeout_s} s: {self.log_path}")

    def url(self) -> str:
        """JupyterLab in a new, empty workspace (no tabs restored from an earlier run)."""
        return f"{self.base}/lab/workspaces/{secrets.token_hex(4)}?token={self.token}"

    def shut_down_kernels(self) -> None:
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)


class Failures(list):
    def check(self, ok: bool, message: str) -> bool:
        log(("ok    " if ok else "FAIL  ") + message)
        if not ok:
            self.append(message)
        return ok


def ink(src: str) -> float:
    """Fraction of non-white pixels of an <img> whose src is a PNG data URL (0 if there is none)."""
    if not src.startswith("data:image/png;base64,"):
        return 0.0
    image = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB")
    pixels = np.asarray(image, dtype=np.int16)  # (H, W, 3)
    return float((pixels.min(axis=2) < 245).mean())


def error_outputs(cell: dict) -> list[str]:
    return [o["ename"] for o in cell["outputs"] if o["output_type"] == "error"]


def open_lab(browser: Browser, lab: Lab) -> Page:
    """JupyterLab's page, once its file browser lists the course root."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(lab.url())
    page.wait_for_selector(".jp-DirListing-item", timeout=120_000)
    return page


def open_notebook(page: Page, lab: Lab, path: str) -> None:
    """Open `path` as a double-click in the file browser does, and wait for its kernel to idle.
    Earlier notebooks' kernels are shut down first, so each notebook has the CPU to itself."""
    lab.shut_down_kernels()
    page.evaluate(
        "async path => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }",
        path,
    )
    page.wait_for_function(
        f"""path => ({JS_CURRENT_NOTEBOOK})()?.context.path === path
                    && ({JS_KERNEL_STATUS})() === 'idle'""",
        arg=path,
        timeout=120_000,
    )


def run_all(page: Page, name: str, restart: bool = False) -> float:
    """Run > Run All Cells (or Kernel > Restart Kernel and Run All Cells), as a learner would.
    Returns the seconds until no cell is queued and the kernel is idle."""
    start = time.monotonic()
    if restart:
        page.get_by_role("menuitem", name="Kernel", exact=True).click()
        page.get_by_role("menuitem", name=re.compile(r"^Restart Kernel and Run All")).click()
        page.locator(".jp-Dialog-button.jp-mod-accept").click()
    else:
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
    page.wait_for_function(f"() => ({JS_BUSY_PROMPTS})() > 0", timeout=30_000)
    page.wait_for_function(
        f"() => ({JS_BUSY_PROMPTS})() === 0 && ({JS_KERNEL_STATUS})() === 'idle'",
        timeout=RUN_ALL_TIMEOUT_S * 1000,
        polling=250,
    )
    seconds = time.monotonic() - start
    log(f"Run All of {name}: {seconds:.1f} s")
    return seconds


def screenshot(page: Page, name: str) -> None:
    page.screenshot(path=OUT / f"{name}.png")


def check_solution(page: Page, path: str, failures: Failures, tag: str) -> list[dict]:
    cells = page.evaluate(JS_CELLS)
    code = [c for c in cells if c["type"] == "code"]
    errors = [(c["index"], error_outputs(c)) for c in code if error_outputs(c)]
    failures.check(not errors, f"{path}: no error output ({errors or 'none'})")
    not_run = [c["index"] for c in code if c["execution_count"] is None]
    failures.check(not not_run, f"{path}: all {len(code)} code cells ran (not run: {not_run})")
    if errors:
        page.evaluate(
            f"i => ({JS_CURRENT_NOTEBOOK})().content.widgets[i].node.scrollIntoView()",
            errors[0][0],
        )
    screenshot(page, tag)
    return cells


def widget_plot(page: Page) -> tuple[int, str]:
    """(cell index, src of its last plot or "") of the one cell with sliders; (-1, "") if none."""
    found = page.evaluate(JS_WIDGET_IMAGES)
    if len(found) != 1:
        return -1, ""
    cell = found[0]
    return cell["index"], (cell["srcs"][-1] if cell["srcs"] else "")


def check_widget(page: Page, failures: Failures, run: int, move_slider: bool) -> bool:
    """Notebook 04 after Run All: the widget's plot is real, stays real, and follows a slider."""
    index, src = widget_plot(page)
    if not failures.check(index >= 0, "notebook 04 has one cell with sliders"):
        return False
    page.evaluate(f"i => ({JS_CURRENT_NOTEBOOK})().content.widgets[i].node.scrollIntoView()", index)
    time.sleep(SETTLE_S)
    _, settled = widget_plot(page)
    amounts = f"ink {ink(src):.3f} when Run All ended, {ink(settled):.3f} {SETTLE_S:.0f} s later"
    real = ink(src) > MIN_INK and ink(settled) > MIN_INK
    screenshot(page, f"04-widget-run{run}")
    failures.check(real, f"run {run}: notebook 04's widget shows a real plot ({amounts})")
    if not move_slider:
        return real
    # Drag the first slider's handle to the right, as a learner would with the mouse.
    panel = page.evaluate(f"() => ({JS_CURRENT_NOTEBOOK})().id")
    cell = page.locator(f"[id='{panel}'] .jp-Cell").nth(index)
    handle = cell.locator(".noUi-handle").first
    box = handle.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + 60, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    try:
        page.wait_for_function(
            f"""old => {{ const c = ({JS_WIDGET_IMAGES})()[0];
                         const src = c && c.srcs[c.srcs.length - 1];
                         return src && src !== old; }}""",
            arg=settled,
            timeout=30_000,
        )
    except PlaywrightError:  # no new image in 30 s: the check just below fails
        pass
    page.wait_for_function(f"() => ({JS_KERNEL_STATUS})() === 'idle'", timeout=30_000)
    time.sleep(1.0)
    _, moved = widget_plot(page)
    screenshot(page, f"04-widget-run{run}-slider")
    failures.check(
        moved != settled and ink(moved) > MIN_INK,
        f"run {run}: moving a slider redraws the plot (ink {ink(moved):.3f})",
    )
    return real


def check_student(page: Page, failures: Failures) -> None:
    cells = page.evaluate(JS_CELLS)
    failed = [c for c in cells if c["type"] == "code" and error_outputs(c)]
    if not failures.check(bool(failed), f"{STUDENT}: Run All stops at an error"):
        screenshot(page, "workshop-01")
        return
    first = failed[0]
    page.evaluate(
        f"i => ({JS_CURRENT_NOTEBOOK})().content.widgets[i].node.scrollIntoView()",
        first["index"],
    )
    screenshot(page, "workshop-01")
    failures.check(
        CHECK_TAG in first["tags"] and error_outputs(first) == ["NotImplementedError"],
        f"{STUDENT}: the first failing cell (#{first['index']}) is a check cell raising "
        f"NotImplementedError (tags {first['tags']}, errors {error_outputs(first)})",
    )


def first_hour(page: Page, lab: Lab, failures: Failures, timings: dict, runs_04: int) -> None:
    """What a learner does first: look at the course root, Run All in 01, 04 and workshop/01."""
    listed = page.locator(".jp-DirListing-itemText").all_text_contents()
    screenshot(page, "lab-root")
    failures.check(
        {"notebooks", "workshop", "README.md"} <= set(listed),
        f"the file browser opens on the course root ({', '.join(listed)})",
    )
    for path in SOLUTIONS:
        runs = runs_04 if path == WIDGET_NOTEBOOK else 1
        real = 0
        open_notebook(page, lab, path)
        for run in range(1, runs + 1):
            timings[f"{Path(path).stem} run {run}"] = run_all(page, path, restart=run > 1)
            check_solution(page, path, failures, f"{Path(path).stem}-run{run}")
            if path == WIDGET_NOTEBOOK:
                real += check_widget(page, failures, run, move_slider=run == runs)
        if path == WIDGET_NOTEBOOK:
            log(f"notebook 04: {real} of {runs} Run Alls ended with a real plot")
    open_notebook(page, lab, STUDENT)
    timings[f"workshop {Path(STUDENT).stem}"] = run_all(page, STUDENT)
    check_student(page, failures)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs-04", type=int, default=1, help="Run Alls of notebook 04 (%(default)s)"
    )
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(
            f"{CHROMIUM} not found: `make browser-test` installs Debian's chromium", file=sys.stderr
        )
        return 2
    OUT.mkdir(exist_ok=True)
    failures, timings, started = Failures(), {}, time.monotonic()
    notebooks = [ROOT / p for p in [*SOLUTIONS, STUDENT]]
    before = {p: saved_outputs(p) for p in notebooks}

    with tempfile.TemporaryDirectory() as settings:
        for name, value in LAB_SETTINGS.items():
            path = Path(settings) / "user-settings" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        lab = Lab(Path(settings))
        try:
            lab.wait_ready()
            timings["server start"] = time.monotonic() - started
            log(f"JupyterLab on port {lab.port} after {timings['server start']:.1f} s")

            specs = lab.api("kernelspecs")
            python3 = specs["kernelspecs"].get("python3", {}).get("spec", {})
            failures.check(
                specs["default"] == "python3" and "specdec-lab" not in specs["kernelspecs"],
                f"kernelspecs: default {specs['default']!r}, all {sorted(specs['kernelspecs'])}",
            )
            # "python" in a kernelspec means the server's own interpreter: .venv/bin/python.
            failures.check(
                python3.get("argv", [""])[0]
                in {"python", "python3", str(ROOT / ".venv/bin/python")},
                f"python3 kernel runs {python3.get('argv', ['?'])[0]!r} (this .venv's python)",
            )

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = open_lab(browser, lab)
                timings["page load"] = time.monotonic() - started - timings["server start"]
                try:
                    first_hour(page, lab, failures, timings, args.runs_04)
                except PlaywrightError as err:  # a timeout or a missing element: show where
                    screenshot(page, "stopped-here")
                    failures.check(False, f"stopped: {str(err).splitlines()[0]}")
                browser.close()
        finally:
            lab.stop()

    changed = [str(p.relative_to(ROOT)) for p in notebooks if saved_outputs(p) != before[p]]
    failures.check(not changed, f"no outputs were saved into the notebooks ({changed or 'none'})")
    timings["total"] = time.monotonic() - started
    log("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    log(f"screenshots in {OUT.relative_to(ROOT)}/")
    if failures:
        print(f"\n{len(failures)} check(s) failed:\n- " + "\n- ".join(failures), file=sys.stderr)
        return 1
    print("\nall browser checks passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
