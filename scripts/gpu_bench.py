"""The GPU half, measured: eager against captured forwards, c, and speculative decoding whose α is
known, at real shapes with random weights (the GPU machine has no hub), then the embedded pair.

`scripts/gpu_check.py` runs `PARTS` in order and writes data/results/gpu-bench-<device>.json
after each one (smoke-bench-... on a CPU dry run), so a run cut short keeps what it measured:

- "costs": t(k), k = 1..16, of each shape in `SHAPES` through the eager lean forward and the
  captured one (CUDA graphs), fastest of interleaved rounds by CUDA events; each shape's memory
  floor, its bytes per forward over the copy bandwidth measured here; t(1) over the floor and the
  regime it names (`profiling.regime`).
- "pairs": c = t_draft(1) / t_target(1) of each pair of shapes, eager and captured.
- "alpha": speculative decoding against captured plain decoding at α = 0.6, 0.7 and 0.8, with a
  drafter whose acceptance is set by construction (`ReplayDrafter`: a real draft forward per
  token, proposing the target's own greedy continuation corrupted at rate 1 − α), γ planned from
  the measured costs, beside `theory.speedup` at the realised α.
- "embedded": the course's trained pair end to end on the device, with its real α.

Capture happens in the warm-up rounds and runs, never inside a timed one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from specdec_lab import decoding, drafters, env, models, sampling, theory
from specdec_lab.engine import sessions
from specdec_lab.measure import profiling, timing
from specdec_lab.measure.profiling import LADDER, ModelShape

RUNTIMES = ("lean", "captured")  # eager and replayed: the same lean forward
KS = list(range(1, 17))
ALPHAS = (0.6, 0.7, 0.8)


def _shape(name, d, layers, heads, mlp, vocab, kv, tied) -> ModelShape:
    return ModelShape(name, d, layers, heads, mlp, vocab, kv, tied)


# The registry's hub models and their neighbours, as Llama shapes (Qwen2.5's q/k/v biases are
# left out: under 0.01% of the bytes). Smallest first, as the memory guard wants.
SHAPES: dict[str, ModelShape] = {
    s.name: s
    for s in [
        _shape("SmolLM2-135M", 576, 30, 9, 1536, 49152, 3, True),
        _shape("SmolLM2-360M", 960, 32, 15, 2560, 49152, 5, True),
        _shape("Qwen2.5-0.5B", 896, 24, 14, 4864, 151936, 2, True),
        _shape("Llama-3.2-1B", 2048, 16, 32, 8192, 128256, 8, True),
        _shape("Qwen2.5-1.5B", 1536, 28, 12, 8960, 151936, 2, True),
        _shape("SmolLM2-1.7B", 2048, 24, 32, 8192, 49152, 32, True),
        _shape("Qwen2.5-7B", 3584, 28, 28, 18944, 152064, 4, False),
        _shape("Llama-3.1-8B", 4096, 32, 32, 14336, 128256, 8, False),
    ]
}
PAIRS = {  # draft -> target: the registry's smollm2 and qwen2.5 pairs, and Llama 3's
    "c_135M_1.7B": ("SmolLM2-135M", "SmolLM2-1.7B"),
    "c_0.5B_7B": ("Qwen2.5-0.5B", "Qwen2.5-7B"),
    "c_1B_8B": ("Llama-3.2-1B", "Llama-3.1-8B"),
}
SMOKE_SHAPES = {"tiny-1M": LADDER["tiny-1M"], "small-29M": LADDER["small-29M"]}
SMOKE_PAIRS = {"c_0.5B_7B": ("tiny-1M", "small-29M")}  # the summary's key, smoke shapes


class ReplayDrafter(drafters.ModelDrafter):
    """A draft whose acceptance rate is known: it runs its model's real one-token forward for
    every token it drafts (so its cost is a real draft's), but proposes the target's greedy
    continuation `reference` (prompt and continuation, on the device), each token replaced by
    another at rate 1 − α. Under greedy verification a proposal is accepted exactly when it is
    the reference token, so acceptances are independent Bernoulli(α) draws, the assumption of
    Leviathan et al.'s E[tokens]. No host sync: positions are host integers, draws on device."""

    def __init__(self, session, reference: torch.Tensor, alpha: float, seed: int = 0) -> None:
        super().__init__(session)
        self.reference, self.alpha = reference, alpha
        self.draws = sampling.generator_on(torch.Generator().manual_seed(seed), reference.device)

    def propose(self, ids, gamma, cfg, generator):
        t0 = self.clock.start()
        start, vocab = ids.shape[0], self.vocab_size
        truth = self.reference[start : start + gamma]  # (γ,)
        keep = torch.rand(gamma, generator=self.draws, device=ids.device) < self.alpha
        other = (
            truth + torch.randint(1, vocab, (gamma,), generator=self.draws, device=ids.device)
        ) % vocab
        tokens = torch.where(keep, truth, other)  # (γ,)
        for i in range(gamma):  # the draft model's own forwards, what a real draft pays
            self.session.logits(torch.cat([ids, tokens[:i]]), last=1)
        self.clock.stop(t0)
        return tokens, drafters.one_hot(tokens, vocab)


def _build(shape: ModelShape, device, dtype):
    return profiling.build_model(shape, device=device, dtype=dtype)


def _sweep(model, ks, repeats) -> dict[str, list[float]]:
    opened = {rt: sessions.open_session(model, runtime=rt) for rt in RUNTIMES}
    return timing.session_sweep(opened, ks, repeats)


def costs(ctx: dict) -> dict:
    """t(k) eager and captured, the floor, and the regime of every shape that fits."""
    device, dtype, shapes = ctx["device"], ctx["dtype"], ctx["shapes"]
    names = models.fit_ladder(list(shapes), shapes, device, dtype) if ctx["gpu"] else list(shapes)
    bandwidth = profiling.measure_bandwidth(device, nbytes=ctx["copy_bytes"])
    out = {"bandwidth_gbs": bandwidth, "ks": ctx["ks"], "shapes": {}}
    for name in names:
        if time.perf_counter() > ctx["deadline"]:
            out["stopped"] = f"time budget spent before {name}"
            break
        config = shapes[name].config()
        floor = profiling.forward_bytes(config, 1, context=32) / (bandwidth * 1e9)
        try:
            model = _build(shapes[name], device, dtype)
            latency = _sweep(model, ctx["ks"], ctx["repeats"])
        except torch.OutOfMemoryError:
            out["stopped"] = f"out of memory at {name}"
            break
        finally:
            model = None
            env.release_memory(device)
        out["shapes"][name] = row = {
            "params": profiling.param_count(config),
            "floor_s": floor,
            "latency_s": latency,
        }
        for rt in RUNTIMES:
            row[f"{rt}_t1_over_floor"] = latency[rt][0] / floor
            row[f"{rt}_regime"] = profiling.regime(latency[rt][0], floor)
        print(
            f"{name}: t(1) eager {1e3 * latency['lean'][0]:.2f} ms, captured "
            f"{1e3 * latency['captured'][0]:.2f} ms, floor {1e3 * floor:.2f} ms"
        )
    return out


def pairs(ctx: dict) -> dict:
    measured = ctx["record"].get("costs", {}).get("shapes", {})
    out = {}
    for key, (draft, target) in ctx["pairs"].items():
        if draft in measured and target in measured:
            d, t = measured[draft]["latency_s"], measured[target]["latency_s"]
            out[key] = {"draft": draft, "target": target}
            out[key] |= {rt: d[rt][0] / t[rt][0] for rt in RUNTIMES}
    return out


def _timed(device, run: Callable[[], decoding.Generation]) -> tuple[float, decoding.Generation]:
    env.synchronize(device)
    t0 = time.perf_counter()
    out = run()
    env.synchronize(device)
    return time.perf_counter() - t0, out


def _best_of(device, run, repeats: int) -> tuple[float, decoding.Generation]:
    return min((_timed(device, run) for _ in range(repeats)), key=lambda timed: timed[0])


def alpha(ctx: dict) -> dict:
    """Speculative decoding at known α against captured plain decoding, on the largest pair."""
    device, dtype, n, repeats = ctx["device"], ctx["dtype"], ctx["tokens"], ctx["runs"]
    measured = ctx["record"]["costs"]["shapes"]
    key = next(k for k, (d, t) in ctx["pairs"].items() if d in measured and t in measured)
    draft_name, target_name = ctx["pairs"][key]
    t_target = measured[target_name]["latency_s"]["captured"]  # (k = 1..16)
    c = measured[draft_name]["latency_s"]["captured"][0] / t_target[0]
    curve = [t / t_target[0] for t in t_target]  # r(k)
    shapes = ctx["shapes"][target_name], ctx["shapes"][draft_name]
    vocab = min(shape.vocab_size for shape in shapes)  # Qwen2.5 pads its two models apart
    target, draft = (
        sessions.open_session(_build(shape, device, dtype), vocab, runtime="captured")
        for shape in shapes
    )
    prompt = torch.randint(vocab, (32,), generator=torch.Generator().manual_seed(0))
    gamma_max = len(curve) - 1

    def plain(tokens: int = n):
        target.crop(0)  # a session reused: from an empty cache, as speculative runs start
        return decoding.autoregressive_generate(target, prompt, tokens, temperature=0)

    reference = plain(n + gamma_max + 1)  # what the drafter replays; captures, warms up
    t_plain, _ = _best_of(device, plain, repeats)
    sequence = torch.cat([prompt, reference.tokens]).to(device)
    out = {
        "draft": draft_name,
        "target": target_name,
        "tokens": n,
        "c": c,
        "verify_cost": curve,
        "plain_tokens_per_s": n / t_plain,
        "runs": {},
    }
    for a in ctx["alphas"]:
        gamma, _ = theory.best_gamma(a, c, curve)
        gamma = max(gamma, 1)
        drafter = ReplayDrafter(draft, sequence, a)

        def spec(drafter=drafter, gamma=gamma):
            return decoding.speculative_generate(target, drafter, prompt, n, gamma, temperature=0)

        spec()  # capture the verify's γ + 1 and warm up: untimed
        t_spec, run = _best_of(device, spec, repeats)
        realised = realised_alpha(run.stats)
        predicted = theory.speedup(realised, gamma, c, curve[gamma])
        speedup = t_plain / t_spec
        per_step = len(run.stats.accepted)
        out["runs"][str(a)] = {
            "gamma": gamma,
            "realised_alpha": realised,
            "greedy_equal": torch.equal(run.tokens, reference.tokens[:n]),  # bf16 may flip
            "speedup": speedup,
            "predicted": predicted,
            "measured_over_predicted": speedup / predicted,
            "ms_per_step": {
                "draft": 1e3 * run.stats.draft_time / per_step,
                "target": 1e3 * run.stats.target_time / per_step,
                "rest": 1e3 * (t_spec - run.stats.draft_time - run.stats.target_time) / per_step,
            },
        }
        print(f"α = {a}: γ = {gamma}, {speedup:.2f}x measured, {predicted:.2f}x predicted")
    return out


def embedded(ctx: dict) -> dict:
    """The embedded pair on the device, captured (the default there), greedy and at T = 1."""
    device, n, repeats = ctx["device"], ctx["tokens"], ctx["runs"]
    pair = models.load_pair("embedded", device=device, dtype=ctx["dtype"])
    prompt = pair.encode("def fibonacci(n):\n    ")
    target = sessions.open_session(pair.target, pair.vocab_size)
    draft = sessions.open_session(pair.draft, pair.vocab_size)
    out = {"runtime": target.runtime}
    for temperature in (0.0, 1.0):
        gen = torch.Generator().manual_seed(0)  # the loops draw from a device twin of it

        def plain(temperature=temperature, gen=gen):
            target.crop(0)
            return decoding.autoregressive_generate(
                target, prompt, n, temperature=temperature, generator=gen
            )

        def spec(temperature=temperature, gen=gen):
            return decoding.speculative_generate(
                target, draft, prompt, n, 4, temperature=temperature, generator=gen
            )

        plain()  # capture and warm-up: untimed
        spec()
        t_plain, _ = _best_of(device, plain, repeats)
        t_spec, run = _best_of(device, spec, repeats)
        out[f"T={temperature:g}"] = {
            "gamma": 4,
            "realised_alpha": realised_alpha(run.stats),
            "speedup": t_plain / t_spec,
        }
        print(f"embedded pair, T = {temperature:g}: {t_plain / t_spec:.2f}x")
    return out


def realised_alpha(stats: decoding.GenerationStats) -> float:
    """The acceptance rate a run shows: accepted drafts over drafts the verifier looked at (a
    step stops looking at its first rejection), the maximum-likelihood α of Bernoulli draws."""
    trials = sum(n + (n < g) for n, g in zip(stats.accepted, stats.gammas, strict=True))
    return sum(stats.accepted) / max(trials, 1)


PARTS: dict[str, Callable[[dict], dict]] = {
    "costs": costs,
    "pairs": pairs,
    "alpha": alpha,
    "embedded": embedded,
}


def context(device: torch.device, smoke: bool, deadline: float) -> dict:
    """The settings of one run: realistic on a GPU, seconds-long on a CPU (or a dry run)."""
    return {
        "device": device,
        "gpu": env.gpu_paths(device),
        "dtype": torch.bfloat16 if env.gpu_paths(device) and not smoke else torch.float32,
        "shapes": SMOKE_SHAPES if smoke else SHAPES,
        "pairs": SMOKE_PAIRS if smoke else PAIRS,
        "ks": [1, 2, 3, 4, 5] if smoke else KS,
        "repeats": 2 if smoke else 5,
        "copy_bytes": 2**24 if smoke else 2**30,
        "tokens": 24 if smoke else 128,
        "runs": 1 if smoke else 3,
        "alphas": ALPHAS,
        "deadline": deadline,
        "record": {},
    }


def summary(record: dict, notebooks: dict | None = None) -> dict:
    """The figures the issue tracks, from whatever parts finished (None where a part did not)."""
    shapes = record.get("costs", {}).get("shapes", {})
    run = record.get("alpha", {}).get("runs", {}).get("0.8", {})

    def over_floor(*names):  # the real shape, or its stand-in in a smoke run
        found = [shapes[n]["captured_t1_over_floor"] for n in names if n in shapes]
        return found[0] if found else None

    return {
        "7B_t1_over_floor": over_floor("Qwen2.5-7B", "small-29M"),
        "1B_t1_over_floor": over_floor("Llama-3.2-1B", "tiny-1M"),
        "c_0.5B_7B": record.get("pairs", {}).get("c_0.5B_7B", {}).get("captured"),
        "spec_speedup_alpha_0.8": run.get("speedup"),
        "measured_over_predicted": run.get("measured_over_predicted"),
        "notebooks_passed": None if notebooks is None else sum(r["ok"] for r in notebooks.values()),
        "notebooks_total": None if notebooks is None else len(notebooks),
    }
