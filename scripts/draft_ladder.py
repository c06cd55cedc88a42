"""The draft ladder on the default (lean) runtime: α, c and the speedup of every shipped draft.

    python scripts/draft_ladder.py            # 4 code + 4 prose prompts x 64 tokens, 1 thread

For each draft in data/models (draft-small, draft, draft-prose, draft-large) and, as the
degenerate "draft too large", the target itself: c (one-token forward of the draft over the
target's, min of 7 interleaved rounds, through the sessions the decoding loop uses), then
speculative decoding at every γ in 1..8, greedy and at T = 1, against autoregressive decoding on
the same prompts: each the fastest of 3 rounds over the whole prompt set, every round running
autoregressive decoding and each γ once in turn (`timing.interleaved`), so autoregressive
decoding is measured again beside each draft and temperature. The best γ per draft
and temperature, its speedup and the α measured in the loop go to
data/results/draft-ladder-<device>.json with the machine it ran on; the held-out α of each draft
(T = 1, from its training log) and its training budget come along from training.json, so the
training time a comparison hides is on the record next to it.
"""

from __future__ import annotations

import argparse

import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from specdec_lab import data, decoding, drafters, env, models
from specdec_lab.data import load_prompts
from specdec_lab.engine import sessions
from specdec_lab.measure import acceptance, records, timing

DRAFTS = ("draft-small", "draft", "draft-prose", "draft-large")


def tokens_per_s(runs: dict, prompts, repeats: int, device) -> dict:
    """{key: (tokens/s, pooled α or NaN)} of each of `runs` ({key: run(ids, i)}) over the whole
    prompt set: the fastest of `repeats` rounds, in each of which every key runs the set once in
    turn (`timing.interleaved`), after a warm-up on the first prompt. Prompt i samples from a
    generator seeded i, so every round repeats the same work."""
    stats: dict = {}

    def whole_set(key):
        def call():
            stats[key] = [runs[key](ids, i).stats for i, ids in enumerate(prompts)]

        return call

    for run in runs.values():
        run(prompts[0], 0)  # warm-up
    calls = {key: whole_set(key) for key in runs}
    best = timing.interleaved(calls, repeats, device, warmups=0)  # seconds, per key
    return {
        key: (
            sum(s.new_tokens for s in stats[key]) / best[key],
            decoding.GenerationStats.merge(stats[key]).acceptance_rate,
        )
        for key in runs
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gammas", type=int, nargs="+", default=list(range(1, 9)))
    parser.add_argument("--prompts", type=int, default=4, help="per domain")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drafts", nargs="+", default=list(DRAFTS))
    args = parser.parse_args(argv)
    env.set_cpu_threads(1)
    device = torch.device("cpu")
    log = data.load_training_log()["models"]
    target = models.load_model(str(data.MODELS_DIR / "target"), device, torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(data.MODELS_DIR / "target")
    vocab = sessions.vocab_size_of(target)
    n_new = args.max_new_tokens
    prompts = [
        models.encode_prompt(tokenizer, p["text"])
        for domain in ("code", "prose")
        for p in load_prompts(domain, args.prompts)
    ]
    t_target = timing.session_latency(target, 1)  # for the record; c is timed beside each draft

    def ar(temperature):
        def run(ids, i):
            gen = torch.Generator().manual_seed(i)
            return decoding.autoregressive_generate(
                target, ids, n_new, temperature=temperature, generator=gen
            )

        return run

    def spec(draft, gamma, temperature):
        # opened once, off the clock (each call starts from an empty cache); the target's session,
        # like plain decoding's, opens inside every call
        drafter = drafters.ModelDrafter(sessions.open_session(draft, vocab))

        def run(ids, i):
            gen = torch.Generator().manual_seed(i)
            return decoding.speculative_generate(
                target, drafter, ids, n_new, gamma, temperature=temperature, generator=gen
            )

        return run

    statistic = f"fastest of {args.repeats} interleaved rounds"
    record: dict = {"t_target_ms": 1e3 * t_target, "statistic": statistic, "drafts": {}}
    names = [*args.drafts, "target (as its own draft)"]
    for name in tqdm(names, desc="drafts"):
        own = name.startswith("target")
        path = data.MODELS_DIR / ("target" if own else name)
        if not (path / "config.json").exists():
            print(f"skipped {name}: {path} not found")
            continue
        draft = target if own else models.load_model(str(path), device, torch.float32)
        opened = {n: sessions.open_session(m) for n, m in (("draft", draft), ("target", target))}
        t_one = timing.session_sweep(opened, [1])  # one-token forwards, interleaved
        entry = {
            "params": sum(p.numel() for p in draft.parameters()),
            "c": t_one["draft"][0] / t_one["target"][0],
            "autoregressive_tokens_per_s": {},
        }
        info = log.get("target" if own else name, {})
        entry["heldout_alpha_T1"] = info.get("alpha")
        if not own:  # distillation against the target, over every recorded stage
            minutes, mtokens = acceptance.training_budget(log, name)
            entry["train_minutes"], entry["train_tokens"] = minutes, round(mtokens * 1e6)
        gammas = [g for g in args.gammas if not own or g <= 3]  # c ~ 1: a few γ show the loss
        for t in (0.0, 1.0):
            # The baseline runs in the same rounds as every γ, so that a machine whose speed
            # drifts over the run (another job starting or stopping) does not tilt the ratios.
            runs = {None: ar(t)} | {g: spec(draft, g, t) for g in gammas}
            rows = tokens_per_s(runs, prompts, args.repeats, device)
            baseline = entry["autoregressive_tokens_per_s"][t] = rows.pop(None)[0]
            best = max(rows, key=lambda g: rows[g][0])
            entry[f"T{t:g}"] = {
                "best_gamma": best,
                "speedup": rows[best][0] / baseline,
                "alpha_in_loop": rows[best][1],
                "speedup_by_gamma": {g: r[0] / baseline for g, r in rows.items()},
            }
        record["drafts"][name] = entry
        print(
            f"{name}: c {entry['c']:.3f}; greedy {entry['T0']['speedup']:.2f}x at γ="
            f"{entry['T0']['best_gamma']} (α {entry['T0']['alpha_in_loop']:.2f}); T=1 "
            f"{entry['T1']['speedup']:.2f}x at γ={entry['T1']['best_gamma']} "
            f"(α {entry['T1']['alpha_in_loop']:.2f})"
        )
    path = records.save_results(
        data.RESULTS_DIR / f"draft-ladder-{device.type}.json", record, device
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
