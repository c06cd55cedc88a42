"""`python -m specdec_lab demo`: watch speculative decoding happen in the terminal.

Accepted draft tokens are printed in green, the rejected draft struck through in red (it is not
kept), the target's correction after a rejection in blue, and bonus tokens (every draft
accepted, one token for free) in purple: the palette of the notebooks' traces. Then the same prompt is
decoded autoregressively and the two runs are compared.
"""

from __future__ import annotations

import argparse
import sys

import torch

from specdec_lab import decoding, display, mock
from specdec_lab.bench import load_prompts
from specdec_lab.decoding import Step
from specdec_lab.models import MODELS_DIR, load_pair
from specdec_lab.runtime import default_device, device_info, set_cpu_threads

DIM, RESET = "\033[2m", "\033[0m"


def _style(kind: str) -> str:
    """The terminal colour of a token kind, shared with the notebooks' traces."""
    return f"\033[{display.ANSI[kind]}m"


class _Streamer:
    """Prints each step's new text, colored by where the tokens came from."""

    def __init__(self, decode, ids: list[int], color: bool) -> None:
        self.decode, self.ids, self.color = decode, list(ids), color
        self.text = decode(self.ids)

    def _emit(self, tokens: list[int], kind: str) -> None:
        self.ids += tokens
        text = self.decode(self.ids)
        new, self.text = text[len(self.text) :], text
        sys.stdout.write(f"{_style(kind)}{new}{RESET}" if self.color else new)

    def __call__(self, step: Step) -> None:
        self._emit(step.draft_tokens[: step.n_accepted], "accepted")
        if self.color and not step.bonus:  # the rejected draft, struck through, not kept
            rejected = self.decode([step.draft_tokens[step.n_accepted]])
            sys.stdout.write(f"{_style('rejected')}{rejected}{RESET}")
        self._emit([step.next_token], "bonus" if step.bonus else "correction")
        sys.stdout.flush()


def _mock_setup():
    target = mock.MockLM(vocab_size=26, sharpness=3.0, seed=0)
    draft = mock.MockDraft(target, quality=0.8)

    def decode(ids) -> str:
        return "".join(chr(ord("a") + int(i)) for i in ids)

    return target, draft, decode, torch.tensor([0, 1]), None, "mock models (26 letters)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lab demo", description=__doc__)
    parser.add_argument("--pair", default="embedded", help="pair name (default: embedded)")
    parser.add_argument(
        "--prompt", default=None, help="prompt text (default: a shipped code prompt)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=120)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (default 1; 0 = torch's default)"
    )
    parser.add_argument("--no-color", action="store_true")
    args = parser.parse_args(argv)
    color = sys.stdout.isatty() and not args.no_color
    set_cpu_threads(args.threads or None)

    use_mock = args.pair == "mock" or (
        args.pair == "embedded" and not (MODELS_DIR / "target" / "config.json").exists()
    )
    if use_mock:
        target, draft, decode, ids, vocab_size, label = _mock_setup()
    else:
        pair = load_pair(args.pair, device=default_device())
        target, draft, decode, vocab_size, label = (
            pair.target,
            pair.draft,
            pair.decode,
            pair.vocab_size,
            pair.describe(),
        )
        ids = pair.encode(
            args.prompt if args.prompt is not None else load_prompts("code", 1)[0]["text"]
        )

    info = device_info()
    print(
        f"{DIM if color else ''}{label}; device {info['device']} ({info['cpu']}, "
        f"{info['torch_threads']} threads){RESET if color else ''}"
    )
    if color:
        print(
            "legend: "
            + "  ".join(
                f"{_style(k)}{display.LEGEND[k]}{RESET}"
                for k in ("accepted", "rejected", "correction", "bonus")
            )
            + "\n"
        )
    sys.stdout.write(decode(ids))
    settings = dict(temperature=args.temperature, top_k=args.top_k, vocab_size=vocab_size)
    spec = decoding.speculative_generate(
        target,
        draft,
        ids,
        args.max_new_tokens,
        args.gamma,
        generator=torch.Generator().manual_seed(args.seed),
        on_step=_Streamer(decode, ids.tolist(), color),
        **settings,
    )
    print("\n")
    ar = decoding.autoregressive_generate(
        target,
        ids,
        args.max_new_tokens,
        generator=torch.Generator().manual_seed(args.seed),
        **settings,
    )
    s, a = spec.stats, ar.stats
    summary = {
        "speculative tokens/s": round(s.tokens_per_second, 1),
        "autoregressive tokens/s": round(a.tokens_per_second, 1),
        "speedup": round(s.tokens_per_second / a.tokens_per_second, 2),
        "acceptance rate alpha": round(s.acceptance_rate, 3),
        "mean accepted drafts per step": round(s.mean_accepted, 2),
        "tokens per target call": round(s.tokens_per_target_call, 2),
        "target calls (spec vs AR)": f"{s.target_calls} vs {a.target_calls}",
    }
    if args.temperature == 0:
        summary["identical to greedy target output"] = bool(torch.equal(spec.tokens, ar.tokens))
    if use_mock:
        print(
            "  (mock models cost nothing to run, so expect no speedup here: the embedded pair shows one)"
        )
    width = max(map(len, summary))
    for key, value in summary.items():
        print(f"  {key:<{width}}  {value}")
    return 0
