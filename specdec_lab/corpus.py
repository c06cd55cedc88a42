"""A two-domain training corpus built from the Python standard library on the running machine.

No download is needed: every machine that runs the course has the stdlib source. Each `.py` file is
split into two texts:

* **code** -- the source with docstrings and comments removed (via `ast` + `tokenize`);
* **prose** -- the docstrings and comment paragraphs, as plain English text.

Files are assigned to train or held-out by a hash of their path relative to the stdlib root, so
the split is deterministic across machines with the same Python version, and evaluation prompts
(`data/prompts/*.jsonl`) come from files the models never saw.

Nothing here runs on import.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import sysconfig
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

EOT = "<|endoftext|>"
"""Document separator written between files; also the tokenizer's bos/eos/pad token."""

DOMAINS = ("code", "prose")

#: Directory names whose contents are never used (test suites, third-party packages, caches).
EXCLUDED_DIRS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "pydoc_data"}
)

#: Markers of generated data tables (the charmap codecs in `encodings/`): not code worth learning.
DATA_TABLE_MARKERS = ("decoding_table = (", "decoding_map = codecs.make_identity_dict")


@dataclass(frozen=True)
class Document:
    """The two domain texts extracted from one source file."""

    relpath: str
    code: str
    prose: str


def stdlib_root() -> Path:
    """The directory of the running interpreter's pure-Python standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_heldout(relpath: str, heldout_percent: int = 5) -> bool:
    """Deterministic held-out assignment: sha1 of the relative path, modulo 100."""
    digest = hashlib.sha1(relpath.replace("\\", "/").encode()).hexdigest()
    return int(digest[:8], 16) % 100 < heldout_percent


def iter_source_files(root: Path | None = None) -> Iterator[tuple[str, Path]]:
    """Yield `(relative_path, path)` for every stdlib `.py` file outside tests and site-packages.

    Sorted, so the corpus is byte-identical between runs on the same interpreter.
    """
    root = Path(root) if root is not None else stdlib_root()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        parts = rel.parts
        if any(p in EXCLUDED_DIRS or p.startswith("config-") for p in parts[:-1]):
            continue
        if parts[-1].startswith("test_") or parts[-1] == "__phello__.py":
            continue
        yield rel.as_posix(), path


def _docstring_nodes(tree: ast.AST) -> list[tuple[ast.Expr, bool]]:
    """Docstring statements of the module, classes and functions, with "is the only statement"."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                found.append((body[0], len(body) == 1))
    return found


_RULE_RE = re.compile(r"^[\W_]*$")  # comment lines made only of punctuation, e.g. "# -------"


def _comment_text(raw: str) -> str | None:
    """Strip the `#` marker; drop shebangs, coding cookies, pragmas and ruler lines."""
    if raw.startswith("#!") or "-*-" in raw or re.match(r"#\s*(type:|noqa|pragma|fmt:)", raw):
        return None
    text = raw.lstrip("#").strip()
    if _RULE_RE.match(text):
        return None
    return text


def split_source(source: str) -> tuple[str, str]:
    """Split Python source into `(code, prose)`.

    `code` is the source with comments and docstrings removed (a docstring that is the only
    statement of its body becomes `...` so the code still parses), trailing whitespace stripped and
    runs of blank lines collapsed to one. `prose` is the cleaned docstrings and comment paragraphs
    (consecutive comment lines joined), separated by blank lines, in source order.

    Raises `SyntaxError` / `tokenize.TokenError` / `ValueError` on source that does not parse.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(lineno: int, col: int) -> int:
        # ast/tokenize columns are utf-8 byte offsets for ast, characters for tokenize; ast gives
        # byte offsets, so convert through the line's encoded bytes.
        return offsets[lineno - 1] + col

    def ast_pos(lineno: int, byte_col: int) -> int:
        line = lines[lineno - 1].encode("utf-8")
        return offsets[lineno - 1] + len(line[:byte_col].decode("utf-8", errors="replace"))

    # (start, end, replacement, prose_text) edits over the source string.
    edits: list[tuple[int, int, str, str | None]] = []
    for expr, only in _docstring_nodes(tree):
        start = ast_pos(expr.lineno, expr.col_offset)
        end = ast_pos(expr.end_lineno, expr.end_col_offset)
        doc = ast.get_docstring(ast.Module(body=[expr], type_ignores=[]), clean=True) or ""
        edits.append((start, end, "..." if only else "", doc.strip() or None))

    comment_block: list[str] = []
    comment_edits: list[tuple[int, int, str, str | None]] = []
    last_comment_line = -10
    block_start = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        start, end = pos(*tok.start), pos(*tok.end)
        text = _comment_text(tok.string)
        own_line = lines[tok.start[0] - 1][: tok.start[1]].strip() == ""
        if not (own_line and tok.start[0] == last_comment_line + 1) and comment_block:
            comment_edits.append((block_start, block_start, "", "\n".join(comment_block)))
            comment_block = []
        if not comment_block:
            block_start = start
        if text:
            comment_block.append(text)
        last_comment_line = tok.start[0]
        comment_edits.append((start, end, "", None))
    if comment_block:
        comment_edits.append((block_start, block_start, "", "\n".join(comment_block)))

    all_edits = sorted(edits + comment_edits, key=lambda e: (e[0], e[1]))
    prose = [e[3] for e in all_edits if e[3]]

    pieces, cursor = [], 0
    for start, end, repl, _ in all_edits:
        if start < cursor:  # zero-width prose markers inside a removed span
            continue
        pieces.append(source[cursor:start])
        pieces.append(repl)
        cursor = end
    pieces.append(source[cursor:])
    code_lines = [line.rstrip() for line in "".join(pieces).splitlines()]
    out: list[str] = []
    for line in code_lines:
        if line.strip() == "":
            if out and out[-1] != "" and not out[-1].endswith(":"):
                out.append("")
            continue
        out.append(line)
    code = "\n".join(out).strip("\n") + "\n"
    return code, "\n\n".join(prose).strip() + "\n"


def extract_documents(root: Path | None = None, progress: bool = True) -> Iterator[Document]:
    """Yield one `Document` per parseable stdlib file; files that fail to read or parse are skipped."""
    files = list(iter_source_files(root))
    for rel, path in tqdm(files, desc="stdlib files", disable=not progress):
        try:
            source = path.read_text(encoding="utf-8")
            if any(marker in source for marker in DATA_TABLE_MARKERS):
                continue
            code, prose = split_source(source)
        except (SyntaxError, tokenize.TokenError, ValueError, UnicodeDecodeError, OSError):
            continue
        if code.strip() or prose.strip():
            yield Document(rel, code, prose)


def build_corpus(
    out_dir: Path,
    root: Path | None = None,
    heldout_percent: int = 5,
    progress: bool = True,
) -> dict[str, object]:
    """Write `{code,prose}_{train,heldout}.txt` into `out_dir` and return their sizes.

    Documents (one per source file) are separated by `EOT`. Returns a dict with, for each of the
    four files, its size in MB and number of source files, plus the stdlib root and python version.
    """
    import platform

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    buckets: dict[str, list[str]] = {f"{d}_{s}": [] for d in DOMAINS for s in ("train", "heldout")}
    heldout_files: list[str] = []
    for doc in extract_documents(root, progress=progress):
        split = "heldout" if is_heldout(doc.relpath, heldout_percent) else "train"
        if split == "heldout":
            heldout_files.append(doc.relpath)
        if doc.code.strip():
            buckets[f"code_{split}"].append(doc.code)
        if doc.prose.strip():
            buckets[f"prose_{split}"].append(doc.prose)
    sizes: dict[str, object] = {
        "stdlib_root": str(Path(root) if root is not None else stdlib_root()),
        "python": platform.python_version(),
        "heldout_percent": heldout_percent,
        "heldout_files": heldout_files,
    }
    for name, docs in buckets.items():
        text = f"\n{EOT}\n".join(docs)
        (out_dir / f"{name}.txt").write_text(text, encoding="utf-8")
        sizes[name] = {"mb": round(len(text.encode()) / 1e6, 3), "files": len(docs)}
    return sizes


def read_documents(path: Path) -> list[str]:
    """Split a corpus file written by `build_corpus` back into its documents."""
    text = Path(path).read_text(encoding="utf-8")
    return [d.strip("\n") + "\n" for d in text.split(f"\n{EOT}\n") if d.strip()]


def _code_prompt(doc: str, max_lines: int, max_chars: int) -> str | None:
    """The first function in `doc` that has a body of at least `max_lines - 1` lines, truncated."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if not stripped.startswith("def ") or not stripped.rstrip().endswith(":"):
            continue
        indent = len(line) - len(stripped)
        body = []
        for nxt in lines[i + 1 : i + max_lines]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        if len(body) >= max_lines - 1:
            text = "\n".join([line.strip()] + [b[indent:] for b in body]) + "\n"
            if len(text) <= max_chars:
                return text
    return None


def _prose_prompt(doc: str, min_chars: int, max_chars: int) -> str | None:
    """The first paragraph of `doc` with at least `min_chars` characters, cut at a word boundary."""
    for para in doc.split("\n\n"):
        para = para.strip()
        if len(para) < min_chars or para.startswith((">>>", "-", "*", "|")):
            continue
        if len(para) > max_chars:
            para = para[:max_chars].rsplit(" ", 1)[0]
        return para
    return None


def extract_prompts(
    root: Path | None = None, heldout_percent: int = 5, n: int = 8
) -> dict[str, list[dict[str, str]]]:
    """Up to `n` prompts per domain, one per held-out file, as `{"id", "domain", "text", "source"}`.

    Code prompts are the signature and first lines of a function (4-6 lines); prose prompts are
    the start of a docstring or comment paragraph (150-400 characters). Only files that
    `is_heldout` are read, so no prompt was trained on. Deterministic: files are visited in sorted
    order and the first `n` that yield a prompt are used.
    """
    out: dict[str, list[dict[str, str]]] = {d: [] for d in DOMAINS}
    for doc in extract_documents(root, progress=False):
        if not is_heldout(doc.relpath, heldout_percent):
            continue
        for domain in DOMAINS:
            if len(out[domain]) >= n:
                continue
            if domain == "code":
                text = _code_prompt(doc.code, max_lines=6, max_chars=450)
            else:
                text = _prose_prompt(doc.prose, min_chars=150, max_chars=400)
            if text:
                pid = f"{domain}-{len(out[domain]):02d}"
                out[domain].append(
                    {"id": pid, "domain": domain, "text": text, "source": doc.relpath}
                )
    return out
