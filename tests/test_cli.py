"""The command-line entry points: demo and bench run end to end and print their summaries."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_lab import bench
from specdec_lab.__main__ import main
from specdec_lab.models import Pair


def test_help(capsys) -> None:
    assert main(["--help"]) == 0
    assert "demo" in capsys.readouterr().out


def test_demo_on_mock_models(capsys) -> None:
    assert main(["demo", "--pair", "mock", "--max-new-tokens", "30", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and "identical to greedy target output  True" in out


def test_bench_table_on_a_tiny_pair() -> None:
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    target = LlamaForCausalLM(config).eval()
    draft = LlamaForCausalLM(config).eval()
    draft.load_state_dict(target.state_dict())  # a perfect draft: every token accepted
    pair = Pair("tiny", target, draft, None, 32, torch.device("cpu"))
    rows, costs = bench.run_bench(pair, [torch.tensor([1, 2, 3])], bench.QUICK, progress=False)
    spec = next(r for r in rows if r.gamma == 3)
    assert spec.alpha == 1.0 and spec.tokens_per_call == 4.0
    assert spec.predicted is not None and costs["c"] > 0
    table = bench.format_table(rows, costs)
    assert all(r.method in table for r in rows) and "HF assisted" in table
    assert set(bench.summarize(rows)) >= {"speedup_vs_autoregressive", "measured_over_predicted"}


def test_cli_reports_errors_in_one_line(capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["demo", "--pair", "gpt2"]) == 2
    err = capsys.readouterr().err
    assert "unreachable" in err and "Traceback" not in err
