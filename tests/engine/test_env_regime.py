"""env.cache_sizes and env.regime (issue 40): the regime is read from the learner's caches."""

from __future__ import annotations

from specdec_lab import env


def test_cache_sizes_read_sysfs(tmp_path) -> None:
    for i, (level, kind, size) in enumerate(
        [
            (1, "Data", "48K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "1280K"),
            (3, "Unified", "48M"),
        ]
    ):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert env.cache_sizes(str(tmp_path)) == {"L2": 1280 * 2**10, "L3": 48 * 2**20}


def test_cache_sizes_say_none_where_the_os_does_not(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(env.platform, "system", lambda: "Windows")
    assert env.cache_sizes(str(tmp_path / "absent")) == {"L2": None, "L3": None}


def test_the_regime_follows_the_weights_over_the_last_level_cache() -> None:
    caches = {"L2": 2**20, "L3": 32 * 2**20}
    assert env.regime(270 * 2**20, caches)["regime"] == "memory-bound"  # SmolLM2 in bfloat16
    assert env.regime(20 * 2**20, caches)["regime"] == "in-cache compute-bound"
    assert env.regime(64 * 2**20, caches)["regime"] == "in between"
    big = env.regime(44 * 2**20, {"L2": 2**21, "L3": 480 * 2**20})  # a 480 MiB L3
    assert big["regime"] == "in-cache compute-bound" and big["cache"] == "L3"
    assert env.regime(2**30, {"L2": 2**21, "L3": None})["cache"] == "L2"
    assert env.regime(2**30, {"L2": None, "L3": None})["regime"] == "unknown"
