"""`python -m specdec_lab demo`: watch speculative decoding happen in the terminal.

Accepted draft tokens are printed in green, the rejected draft struck through in red (it is not
kept), the target's correction after a rejection in blue, and bonus tokens (every draft
accepted, one token for free) in purple: the palette of the notebooks' traces.

The default pair is SmolLM2-135M-Instruct with the draft distilled from it here, where
`make smollm2` has cached it: a pretrained model that writes real code. Without it, the
embedded pair (whose greedy text loops, and the demo says so). Each run (sampled at T = 0.7
first, then greedy, by default) is followed by the same prompt decoded autoregressively, and the
two are compared. Before its runs the demo plans (`specdec_lab.measure.plan`): it measures the
target's forward over 1-9 tokens and one step of each drafter the pair offers, probes α at each
temperature over the run's own length, and runs the drafter and γ with the best expected speedup (or a token tree of the
draft model, where its own probe expects it to beat every chain), printed beside the measured
one. Where the pair's default dtype is not float32 (bfloat16 on a CPU that computes it
natively), it plans in both and keeps the dtype expected to decode fastest at the first
temperature (`plan.choose_dtype`). The
first line names the runtime that ran the models (lean, captured or hf, see
`specdec_lab.engine.sessions`). Both decoders are warmed up first, so neither pays for
first-call costs (kernel selection, allocator growth) that would skew the speedup on a GPU.
"""

from __future__ import annotations

import argparse
import sys

import torch

from specdec_lab import decoding, display, tree
from specdec_lab.cli import non_negative_temperature, planned_pair, positive_int
from specdec_lab.data import MODELS_DIR, load_prompts
from specdec_lab.decoding import Step
from specdec_lab.engine import sessions
from specdec_lab.env import default_device, device_info, set_cpu_threads
from specdec_lab.inputs import check_positions
from specdec_lab.measure import plan
from specdec_lab.models import DTYPES, load_pair, smollm2
from specdec_lab.proof import mock

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


def _default_pair() -> str:
    """SmolLM2 and its draft where both are here (real text), else the embedded pair."""
    if smollm2.pair_available():
        return "smollm2-local"
    return "embedded"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lab demo", description=__doc__)
    parser.add_argument("--pair", help="pair name (default: smollm2-local, else embedded; or mock)")
    parser.add_argument("--target", help="target: a hub id or a directory")
    parser.add_argument("--draft", help="draft: a hub id or a directory")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="default: the pair's, or planned")
    parser.add_argument("--prompt", help="prompt text (default: a shipped code prompt)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=120)
    parser.add_argument("--gamma", type=positive_int, help="draft length (default: planned here)")
    parser.add_argument(
        "--temperatures",
        type=non_negative_temperature,
        nargs="+",
        default=[0.7, 0.0],
        help="one run per temperature, 0 = greedy (default: 0.7 then 0)",
    )
    parser.add_argument(
        "--runtime",
        default=sessions.DEFAULT_RUNTIME,
        choices=sessions.RUNTIMES,
        help="how transformers models run: our lean forward where it covers the family, "
        "replayed as CUDA graphs on CUDA (auto, the default), always eager (lean), always "
        "replayed (captured), or transformers' own (hf)",
    )
    parser.add_argument("--top-k", type=positive_int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (default 1; 0 = torch's default)"
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=2,
        help="interleaved timed rounds; the fastest counts",
    )
    parser.add_argument("--no-color", action="store_true")
    args = parser.parse_args(argv)
    color = sys.stdout.isatty() and not args.no_color
    set_cpu_threads(args.threads or None)

    use_mock = args.pair == "mock" or (
        args.pair is None
        and args.target is None
        and not (MODELS_DIR / "target" / "config.json").exists()
    )
    if use_mock:
        target, draft, decode, ids, vocab_size, label = _mock_setup()
    else:
        if args.pair is None and args.target is None:
            args.pair = _default_pair()
            if args.pair == "embedded":
                print(
                    f"(for a pretrained model that writes real code, run `{smollm2.FETCH_COMMAND}`)"
                )
        pair = load_pair(
            args.pair, default_device(), args.dtype, target=args.target, draft=args.draft
        )
        ids = pair.encode(
            args.prompt if args.prompt is not None else load_prompts("code", 1)[0]["text"]
        )
        check_positions([pair.target, pair.draft], len(ids), args.max_new_tokens)
        pair, plans = planned_pair(
            pair, ids, args, args.temperatures, args.runtime, args.max_new_tokens, not args.gamma
        )
        target, draft, decode, vocab_size = pair.target, pair.draft, pair.decode, pair.vocab_size
        label = pair.describe()
        candidates = plan.pair_candidates(pair, args.runtime)

    info = device_info()
    runtime = sessions.runtime_of(target, args.runtime)
    print(
        f"{DIM if color else ''}{label}; device {info['device']} ({info.get('gpu', info['cpu'])}, "
        f"{info['torch_threads']} threads); runtime {runtime}{RESET if color else ''}"
    )
    if color:
        print(
            "legend: "
            + "  ".join(
                f"{_style(k)}{display.LEGEND[k]}{RESET}"
                for k in ("accepted", "rejected", "correction", "bonus")
            )
        )

    # A chat model ends its answer with an end-of-turn token: both decoders stop there (the
    # embedded and mock targets name none, or never write it).
    eos = getattr(getattr(target, "generation_config", None), "eos_token_id", None)

    def settings(temperature):  # the same for both decoders, and the same seed
        return dict(
            temperature=temperature,
            top_k=args.top_k,
            generator=torch.Generator().manual_seed(args.seed),
            vocab_size=vocab_size,
            runtime=args.runtime,
            eos_token_id=eos,
        )

    def spec(temperature, n, on_step=None, drafter="draft model", gamma=4, shape=None):
        if shape is not None:  # the plan chose a token tree of the draft model
            return tree.tree_speculative_generate(
                target, draft, ids, n, shape, on_step=on_step, **settings(temperature)
            )
        tgt, dft = (target, draft) if use_mock else candidates[drafter]()
        return decoding.speculative_generate(
            tgt, dft, ids, n, gamma, on_step=on_step, **settings(temperature)
        )

    def autoregressive(temperature, n):
        return decoding.autoregressive_generate(target, ids, n, **settings(temperature))

    warm = min(8, args.max_new_tokens)  # untimed: first-call costs would land on one side only
    for name in ["draft model"] if use_mock else candidates:
        spec(0.0, warm, drafter=name)
    autoregressive(0.0, warm)
    for temperature in args.temperatures:
        kind = "greedy" if temperature == 0 else f"sampled at T = {temperature:g}"
        drafter, gamma, planned, shape = "draft model", args.gamma or 4, None, None
        if not use_mock:
            planned = plans[temperature]
            drafter = planned.drafter or pair.drafter
            shape = None if args.gamma else planned.tree  # --gamma asks for a chain of γ
            gamma = args.gamma or planned.gamma or 1  # plain decoding planned: show γ = 1
        print(f"\n--- {kind}: {drafter}, {f'tree {shape}' if shape else f'γ = {gamma}'} ---")
        if planned is not None:
            print(planned.describe() + ("  [--gamma overrides γ]" if args.gamma else ""))
        if temperature == 0 and not use_mock and args.pair == "embedded":
            print(display.greedy_loop_note())
        sys.stdout.write(decode(ids))
        streamer = _Streamer(decode, ids.tolist(), color)
        out = spec(temperature, args.max_new_tokens, streamer, drafter, gamma, shape)
        print("\n")
        ar = autoregressive(temperature, args.max_new_tokens)
        for _ in range(args.rounds - 1):  # interleaved repeats, same seeds: keep the fastest
            again = spec(temperature, args.max_new_tokens, None, drafter, gamma, shape)
            out = min(out, again, key=_secs)
            ar = min(ar, autoregressive(temperature, args.max_new_tokens), key=_secs)
        n = args.max_new_tokens  # the plan's expectation for a whole call of so many tokens
        expected = None if planned is None else planned.expected(drafter, gamma, new_tokens=n)
        if shape is not None:
            expected = planned.predicted  # the tree's, from its own probe
        at_run_alpha = None  # the same formula with the α this run measured: the probe's error
        drafted = out.stats.trials > 0  # a one-token run drafts nothing: it has no α
        if planned is not None and expected is not None and shape is None and drafted:
            alpha = out.stats.acceptance_rate
            at_run_alpha = planned.expected(drafter, gamma, alpha=alpha, new_tokens=n)
        _summary(out, ar, temperature, use_mock, expected, getattr(target, "dtype", None))
        if at_run_alpha is not None:
            print(f"  (the plan's formula at this run's α: {at_run_alpha:.2f}x)")
    return 0


def _secs(run) -> float:
    """Seconds a run took (its tokens are the same in every round: the seed is fixed)."""
    return run.stats.wall_time


def _summary(spec, ar, temperature: float, use_mock: bool, expected, dtype) -> None:
    s, a = spec.stats, ar.stats
    summary = {
        "speculative tokens/s": round(s.tokens_per_second, 1),
        "autoregressive tokens/s": round(a.tokens_per_second, 1),
        "speedup": round(s.tokens_per_second / a.tokens_per_second, 2),
        "acceptance rate alpha": round(s.acceptance_rate, 3) if s.trials else "none drafted",
        "mean accepted drafts per step": round(s.mean_accepted, 2),
        "tokens per target call": round(s.tokens_per_target_call, 2),
        "target calls (spec vs AR)": f"{s.target_calls} vs {a.target_calls}",
    }
    if expected is not None:
        summary["speedup the plan expected"] = round(expected, 2)
    if temperature == 0:
        same = bool(torch.equal(spec.tokens, ar.tokens))
        summary["identical to greedy target output"] = same
        if not same and dtype not in (None, torch.float32):
            summary["identical to greedy target output"] = (
                f"False: in {str(dtype).removeprefix('torch.')} a forward over k tokens can round "
                "differently from k one-token forwards, so a near-tie can part the texts"
            )
    else:
        same = bool(torch.equal(spec.tokens, ar.tokens))
        summary["same tokens as autoregressive"] = (
            f"{same} (not expected: the two runs use their random numbers differently; "
            "the distribution of the output is the same, notebook 02)"
        )
    if use_mock:
        print(
            "  (mock models cost nothing to run, so expect no speedup here: the embedded pair shows one)"
        )
    width = max(map(len, summary))
    for key, value in summary.items():
        print(f"  {key:<{width}}  {value}")
