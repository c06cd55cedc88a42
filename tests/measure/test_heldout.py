"""The held-out texts of notebook 03: shipped, and the same on every Python."""

import json
import platform

import pytest

from specdec_lab.course import corpus

RECORD = json.loads(corpus.HELDOUT_FILE.read_text(encoding="utf-8"))


def test_the_file_records_its_source_version_and_licence() -> None:
    assert RECORD["python"] == "CPython 3.11.7"
    assert RECORD["license"].startswith("PSF-2.0")
    licence = (corpus.HELDOUT_FILE.parent / "LICENSE").read_text(encoding="utf-8")
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence
    assert (RECORD["min_chars"], RECORD["max_chars"]) == (1536, 2048)
    assert corpus.HELDOUT_FILE.stat().st_size < 150_000  # small: tens of KB of text
    for domain in ("code", "prose"):
        assert RECORD[domain], domain
        for entry in RECORD[domain]:
            assert corpus.is_heldout(entry["file"]), entry["file"]  # never trained on
            assert RECORD["min_chars"] < len(entry["text"]) <= RECORD["max_chars"]


def test_heldout_texts_are_the_shipped_ones_whatever_the_stdlib(monkeypatch, tmp_path) -> None:
    expected = {d: [e["text"] for e in RECORD[d]] for d in ("code", "prose")}
    # No stdlib at all: an empty directory, and any attempt to walk one fails the test.
    monkeypatch.setattr(corpus, "stdlib_root", lambda: tmp_path)
    monkeypatch.setattr(corpus, "iter_source_files", pytest.fail)
    assert corpus.heldout_texts(1000) == expected  # all of them
    sixteen = corpus.heldout_texts(16, max_chars=1000)  # notebook 03 on a CPU asks for 16
    assert sixteen == {d: [t[:1000] for t in ts[:16]] for d, ts in expected.items()}
    with pytest.raises(ValueError, match="cut to 2048"):
        corpus.heldout_texts(16, max_chars=4096)
    with pytest.raises(ValueError, match="at least 1"):
        corpus.heldout_texts(0)


@pytest.mark.skipif(
    platform.python_implementation() != "CPython" or platform.python_version() != "3.11.7",
    reason="the shipped file was written from CPython 3.11.7's stdlib",
)
def test_the_file_is_what_the_selection_writes_on_its_python(tmp_path) -> None:
    written = corpus.write_heldout_file(tmp_path / "heldout.json")
    assert written == RECORD
    assert (tmp_path / "heldout.json").read_bytes() == corpus.HELDOUT_FILE.read_bytes()


def test_the_selection_reads_the_root_it_is_given(tmp_path) -> None:
    """select_heldout_texts walks the stdlib it is pointed at, so on another Python it differs:
    here a made-up stdlib with one held-out file."""
    name = next(f"m{i}.py" for i in range(1000) if corpus.is_heldout(f"m{i}.py"))
    doc = "A docstring long enough to count as prose. " * 50
    (tmp_path / name).write_text(f'"""{doc}"""\n' + "x = 1\n" * 400)
    other = next(f"n{i}.py" for i in range(1000) if not corpus.is_heldout(f"n{i}.py"))
    (tmp_path / other).write_text(f'"""{doc}"""\n' + "y = 2\n" * 400)  # trained on: left out
    got = corpus.select_heldout_texts(root=tmp_path)
    assert [rel for rel, _ in got["code"]] == [name] and [rel for rel, _ in got["prose"]] == [name]
    assert len(got["code"][0][1]) == corpus.HELDOUT_MAX_CHARS
