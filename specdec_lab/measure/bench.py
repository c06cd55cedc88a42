"""`python -m specdec_lab bench`: speculative vs autoregressive vs HF assisted generation.

Everything is measured side by side in one run, on the same pair and prompts, and quoted as the
median over repeats: for each runtime (our lean forward and transformers' eager forward, see
`specdec_lab.lm`), our autoregressive decoding and speculative decoding at every γ, greedy and
sampled (T = 0.7 and 1.0, seeded per prompt, every γ, so each temperature has its own best γ);
then transformers' own generate and assisted generation, and the other drafting methods on the
default runtime. Next to each measured speedup stands
Leviathan's prediction (1 − α^(γ+1)) / ((1 − α)(γc + 1)) from the α and c measured in the same
run. Each row also gets its per-prompt spread (min / median / max speedup over the prompts) and
the repeated-4-gram fraction of its outputs (how loopy the text is: loops are easy to draft).

Greedy speculative output equals autoregressive output up to numerics: the bench asserts it in
float32 and, in reduced precision, records and prints how many outputs differ. The JSON record
(with the machine it ran on) goes to data/results/.
"""

from __future__ import annotations

import contextlib
import copy
import math
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from specdec_lab import data, decoding, drafters, heads, inputs, theory, tree
from specdec_lab.data import (
    MODELS_DIR,
    load_prompts,  # noqa: F401  (notebooks call data.load_prompts)
)
from specdec_lab.engine import llama, sessions
from specdec_lab.env import synchronize
from specdec_lab.measure import timing
from specdec_lab.models import Pair

RESULTS_DIR = data.RESULTS_DIR


@dataclass(frozen=True)
class BenchConfig:
    gammas: tuple[int, ...] = (2, 3, 4, 5, 6, 8)
    max_new_tokens: int = 64
    repeats: int = 3
    n_prompts: int = 4
    domain: str = "code"
    hf: bool = True  # include transformers' own generate, assisted generation and prompt lookup
    temperatures: tuple[float, ...] = (0.7, 1.0)  # sampled rows, every γ
    runtimes: tuple[str, ...] = ("lean", "hf")  # the first is the reference for speedups
    seed: int = 0  # prompt i samples with torch.Generator().manual_seed(seed + i)
    methods: bool = True  # rows for prompt lookup, the heuristic γ schedule and the draft head


QUICK = BenchConfig(gammas=(3,), max_new_tokens=16, repeats=1, n_prompts=1)
MAX_TREE_NODES = 15  # the tree row's shape is chosen up to this size from the verify curve


@dataclass
class Row:
    method: str
    tokens_per_s: float
    gamma: int | None = None
    temperature: float = 0.0
    runtime: str = "lean"  # how our rows run the models; transformers' rows say "hf"
    alpha: float | None = None
    tokens_per_call: float | None = None
    c: float | None = None  # draft forward time / target one-token forward time, in the loop
    verify_cost: float | None = None  # target forward over γ+1 tokens / over one token
    speedup: float | None = None  # over our autoregressive decoding (first runtime), same T
    predicted: float | None = None  # Leviathan's formula with this run's α and c
    predicted_verify: float | None = None  # ... with the measured verify cost instead of 1
    samples: list[float] = field(default_factory=list)  # tokens/s of each repeat
    prompt_tokens_per_s: list[float] = field(default_factory=list)  # per prompt, median of repeats
    prompt_speedups: list[float] = field(default_factory=list)  # per prompt, over autoregressive
    repeated_4grams: float | None = None  # median over prompts of `repeated_ngram_fraction`
    mismatches: int | None = None  # greedy: outputs that differ from autoregressive decoding
    step_ms: dict[str, float] | None = None  # per step (target call): draft / target / loop ms

    @property
    def ratio(self) -> float | None:
        return self.speedup / self.predicted if self.speedup and self.predicted else None

    @property
    def spread(self) -> tuple[float, float, float] | None:
        """(min, median, max) of the per-prompt speedups."""
        s = self.prompt_speedups
        return (min(s), statistics.median(s), max(s)) if s else None


def repeated_ngram_fraction(tokens: Sequence[int], n: int = 4) -> float:
    """The fraction of the n-grams of `tokens` that repeat an n-gram starting earlier.

    A measure of looping: 0 for text with no repeated n-gram, close to 1 for a short cycle
    repeated many times. NaN when `tokens` is shorter than n (there is no n-gram).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return float("nan")
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return repeats / len(grams)


@dataclass
class _Timed:
    rates: list[float]  # tokens/s of each repeat, over all prompts
    prompt_rates: list[float]  # tokens/s of each prompt, median over repeats
    outputs: list[object]  # run outputs, repeat by repeat, prompt by prompt


def _timed_runs(
    run: Callable[[torch.Tensor, int], tuple[int, object]],
    prompts: list[torch.Tensor],
    repeats: int,
    device: torch.device,
) -> _Timed:
    """Time `run(ids, prompt_index)` on every prompt, `repeats` times, after one untimed warm-up."""
    run(prompts[0], 0)  # warm-up: allocator, kernels, lazy imports
    rates, outputs = [], []
    per_prompt: list[list[float]] = [[] for _ in prompts]
    for _ in range(repeats):
        n_tokens, seconds = 0, 0.0
        for i, ids in enumerate(prompts):
            synchronize(device)
            start = time.perf_counter()
            n, out = run(ids, i)
            synchronize(device)
            elapsed = time.perf_counter() - start
            seconds += elapsed
            n_tokens += n
            per_prompt[i].append(n / elapsed)
            outputs.append(out)
        rates.append(n_tokens / seconds)
    return _Timed(rates, [statistics.median(r) for r in per_prompt], outputs)


def run_bench(pair: Pair, prompts: list[torch.Tensor], cfg: BenchConfig, progress: bool = True):
    """Measure every method on `prompts` (list of (L,) ids). Returns (rows, costs).

    Raises ValueError before any forward when a prompt + max_new_tokens exceeds the pair's
    positions, and AssertionError when, in float32, a greedy method changed the output.
    """
    dev, n_new, vocab = pair.device, cfg.max_new_tokens, pair.vocab_size
    target, draft = pair.target, pair.draft
    inputs.check_positions([target, draft], max(len(p) for p in prompts), n_new)
    lean_ok = all(llama.lean_support(m) is None for m in (target, draft))
    runtimes = [r for r in cfg.runtimes if r == "hf" or lean_ok]  # lean only where it covers
    default = runtimes[0]

    def ours_ar(temperature: float, runtime: str):
        def run(ids, i):
            gen = torch.Generator().manual_seed(cfg.seed + i)
            out = decoding.autoregressive_generate(
                target, ids, n_new, temperature, generator=gen, vocab_size=vocab, runtime=runtime
            )
            return out.stats.new_tokens, out

        return run

    # transformers decodes the same vocabulary as ours: padded logits rows are suppressed.
    padded = list(range(vocab, sessions.vocab_size_of(target)))

    def hf(assisted: dict | None = None, **settings):
        """transformers' generate; `settings` go into a generation config, as transformers 5
        expects, and `assisted` holds the assistant model (and tokenizers) to pass beside it."""
        settings.update(max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False)
        config = _generation_config(target, suppress_tokens=padded or None, **settings)

        def run(ids, i):
            ids = ids[None].to(dev)
            with _quiet_transformers():
                out = target.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    generation_config=config,
                    **(assisted or {}),
                )
            new = out[0, ids.shape[1] :].cpu()
            return new.shape[0], new

        return run

    def ours_with(
        make_pair, gamma: int, temperature: float, generate=decoding.speculative_generate
    ):
        """Speculative decoding with a fresh (target, drafter) from `make_pair()` per run."""

        def run(ids, i):
            session, drafter = make_pair()
            out = generate(
                session,
                drafter,
                ids,
                n_new,
                gamma,
                temperature=temperature,
                generator=torch.Generator().manual_seed(cfg.seed + i),
                vocab_size=vocab,
            )
            return out.stats.new_tokens, out

        return run

    def ours_spec(gamma: int, temperature: float, runtime: str):
        def open_both():
            return sessions.open_session(target, vocab, runtime), sessions.open_session(
                draft, vocab, runtime
            )

        return ours_with(open_both, gamma, temperature)

    def ours_tree(branching: tuple[int, ...], temperature: float):
        return ours_with(
            lambda: (target, draft), branching, temperature, tree.tree_speculative_generate
        )

    methods: list[tuple[str, Callable, object, Callable]] = []  # (name, make, γ, generate)
    if cfg.methods:
        spec = decoding.speculative_generate
        methods.append(
            ("prompt lookup γ=4", lambda: (target, drafters.PromptLookupDrafter(vocab)), 4, spec)
        )
        methods.append(
            (
                "heuristic γ≤10",
                lambda: (
                    target,
                    drafters.HeuristicGamma(
                        drafters.ModelDrafter(sessions.open_session(draft, vocab))
                    ),
                ),
                10,
                spec,
            )
        )
        methods.append(
            (
                "lookup, else draft γ=6",
                lambda: (
                    target,
                    drafters.LookupThenModel(
                        drafters.ModelDrafter(sessions.open_session(draft, vocab))
                    ),
                ),
                6,
                spec,
            )
        )
        if pair.name == "embedded" and (MODELS_DIR / "head").is_dir():
            head = heads.load_head(MODELS_DIR / "head", dev).to(pair.dtype)
            methods.append(
                ("draft head γ=4", lambda: heads.head_drafter(target, head, vocab), 4, spec)
            )

    def measured_rows(temperature: float) -> list[tuple[str, int | None, str, Callable]]:
        """(name, γ, runtime, run) of our rows at one temperature, every runtime and γ."""
        t = "" if temperature == 0 else f" T={temperature:g}"
        out = []
        for rt in runtimes:
            out.append((f"autoregressive{t} (ours, {rt})", None, rt, ours_ar(temperature, rt)))
            out += [
                (f"speculative γ={g}{t} (ours, {rt})", g, rt, ours_spec(g, temperature, rt))
                for g in cfg.gammas
            ]
        out += [
            (f"{name}{t} (ours, {default})", None, default, ours_with(make, g, temperature, gen))
            for name, make, g, gen in methods
            if temperature in (0.0, 1.0)
        ]
        if cfg.methods and temperature in (0.0, 1.0):  # shape chosen once the chains ran
            out.append((f"tree{t} (ours, {default})", None, default, None))
        return out

    curve: list[float] = []  # the target's verify cost by tokens per forward, once

    def tree_entry(name: str, temperature: float) -> tuple[str, None, str, Callable]:
        """The tree row at `temperature`: the shape `tree.choose_branching` picks from the α and
        c of the best chain row measured at that temperature and the device's verify curve."""
        if not curve:
            curve.extend(timing.verify_curve(target, default, MAX_TREE_NODES + 1))
        chains = [r for r in rows if r.gamma and r.temperature == temperature]
        chain = max((r for r in chains if r.runtime == default), key=lambda r: r.tokens_per_s)
        ar = next(r for r in rows if r.gamma is None and r.temperature == temperature)
        own, spec = stats_of[ar.method], stats_of[chain.method]
        c = (spec.draft_time / spec.draft_calls) / (own.target_time / own.target_calls)
        shape = tree.choose_branching(min(chain.alpha, 1 - 1e-9), c, curve)
        label = name.replace("tree", f"tree {'-'.join(map(str, shape))}")
        return label, None, default, ours_tree(shape, temperature)

    plan = measured_rows(0.0)
    if cfg.hf:
        plan += [("HF generate (greedy)", None, "hf", hf())]
        assisted = _hf_assisted_kwargs(pair)
        if isinstance(assisted, str):
            print(f"skipped HF assisted: {assisted}")
        else:
            plan += [("HF assisted (default schedule)", None, "hf", hf(assisted))]
        plan += [("HF prompt lookup", None, "hf", hf(prompt_lookup_num_tokens=10))]
    for t in cfg.temperatures:
        plan += measured_rows(t)

    rows: list[Row] = []
    tokens_of: dict[str, list[list[int]]] = {}  # method -> output tokens, repeat by prompt
    stats_of: dict[str, decoding.GenerationStats] = {}  # method -> pooled counters (ours)
    for name, gamma, runtime, run in tqdm(plan, desc="bench", disable=not progress):
        temperature = float(next(iter(re.findall(r"T=([\d.]+)", name)), 0.0))
        if run is None:
            name, gamma, runtime, run = tree_entry(name, temperature)
        try:
            timed = _timed_runs(run, prompts, cfg.repeats, dev)
        except (ValueError, RuntimeError, TypeError) as err:  # transformers' own methods only
            if "(ours" in name:
                raise
            print(f"skipped {name}: {type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        row = Row(name, statistics.median(timed.rates), gamma, temperature, runtime)
        row.samples, row.prompt_tokens_per_s = timed.rates, timed.prompt_rates
        tokens_of[name] = [_tokens(o) for o in timed.outputs]
        row.repeated_4grams = statistics.median(map(repeated_ngram_fraction, tokens_of[name]))
        if isinstance(timed.outputs[0], decoding.Generation):
            pooled = decoding.GenerationStats.merge([o.stats for o in timed.outputs])
            row.tokens_per_call = pooled.tokens_per_target_call
            alpha = pooled.acceptance_rate  # NaN when nothing was drafted (autoregressive)
            row.alpha = None if math.isnan(alpha) else alpha
            stats_of[name] = pooled
            draft_s = 0.0 if math.isnan(pooled.draft_time) else pooled.draft_time
            loop_s = pooled.wall_time - draft_s - pooled.target_time
            row.step_ms = {
                key: 1e3 * seconds / pooled.target_calls
                for key, seconds in (
                    ("draft", draft_s),
                    ("target", pooled.target_time),
                    ("loop", loop_s),
                )
            }
        rows.append(row)

    # Greedy exactness: every greedy method produced the autoregressive tokens. In float32 this
    # is the benchmark's guard; in lower precision, batched verification (γ+1 positions in one
    # forward) rounds differently from one-token forwards, and near-ties can flip the argmax.
    reference = tokens_of[rows[0].method]
    for row in rows:
        if row.temperature == 0:
            outs = tokens_of[row.method]
            row.mismatches = sum(a != b for a, b in zip(outs, reference, strict=True))
            if pair.dtype == torch.float32 and "(ours" in row.method:
                assert row.mismatches == 0, f"{row.method} changed the greedy output in float32"

    # Speedups are over our autoregressive decoding on the default runtime at the same
    # temperature. α, c and the verify cost of each row come from the runs themselves: the time
    # spent inside draft and target forwards, against the target's one-token forward in
    # autoregressive decoding on the same runtime at the same temperature.
    def ar_row(temperature: float, runtime: str) -> Row:
        return next(
            r
            for r in rows
            if r.method.startswith("autoregressive")
            and r.temperature == temperature
            and r.runtime == runtime
        )

    for row in rows:
        ar = ar_row(row.temperature, default)
        row.speedup = row.tokens_per_s / ar.tokens_per_s
        row.prompt_speedups = [
            a / b for a, b in zip(row.prompt_tokens_per_s, ar.prompt_tokens_per_s, strict=True)
        ]
        if row.gamma and row.alpha is not None and row.method in stats_of:
            own = stats_of[ar_row(row.temperature, row.runtime).method]
            t_target = own.target_time / own.target_calls
            pooled = stats_of[row.method]
            row.c = pooled.draft_time / pooled.draft_calls / t_target
            row.verify_cost = pooled.target_time / pooled.target_calls / t_target
            alpha = min(row.alpha, 1 - 1e-9)
            row.predicted = theory.speedup(alpha, row.gamma, row.c)
            row.predicted_verify = theory.speedup(alpha, row.gamma, row.c, row.verify_cost)
    best = max((r for r in rows if r.gamma and r.temperature == 0), key=lambda r: r.tokens_per_s)
    return rows, {rt: timing.measure_c(pair, best.gamma, rt) for rt in runtimes}


def _tokens(output) -> list[int]:
    return (output.tokens if isinstance(output, decoding.Generation) else output).tolist()


@contextlib.contextmanager
def _quiet_transformers():
    """transformers 5.24's assisted generation calls the assistant's `generate` with a generation
    config AND keyword arguments, and then warns about its own call (twice per run). Our call
    passes a config only; this silences the warnings transformers raises about itself."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def _generation_config(model, **settings):
    """The model's own generation config with `settings` applied: transformers 5 takes settings
    this way without warning that they override the model's defaults."""
    config = copy.deepcopy(model.generation_config)
    config.update(**settings)
    return config


def _hf_assisted_kwargs(pair: Pair) -> dict | str:
    """generate() keywords for transformers' assisted generation with `pair.draft`, or the
    reason it cannot run. transformers refuses an assistant whose config.vocab_size differs
    (Qwen2.5-0.5B vs -7B pad to 151936 vs 152064) unless it gets both tokenizers: its universal
    assisted decoding then re-tokenizes the draft's text for the target."""
    same = pair.target.config.get_text_config().vocab_size == (
        pair.draft.config.get_text_config().vocab_size
    )
    if same:
        return {"assistant_model": pair.draft}
    if pair.tokenizer is None:
        return "the vocabulary sizes differ and the pair has no tokenizer to re-tokenize with"
    return {
        "assistant_model": pair.draft,
        "tokenizer": pair.tokenizer,
        "assistant_tokenizer": pair.tokenizer,
    }


def format_table(rows: list[Row], costs: dict[str, dict[str, float]]) -> str:
    lines = [
        f"{'method':<40}{'tok/s':>7}{'α':>7}{'tok/call':>9}{'c':>7}{'verify':>7}{'speedup':>9}"
        f"{'predicted':>10}{'meas/pred':>10}{'pred+verify':>12}",
        "-" * 118,
    ]

    def fmt(x: float | None, width: int, spec: str, suffix: str = "") -> str:
        text = "—" if x is None else format(x, spec) + suffix
        return text.rjust(width)

    for r in rows:
        lines.append(
            f"{r.method:<40}{r.tokens_per_s:>7.1f}{fmt(r.alpha, 7, '.3f')}"
            f"{fmt(r.tokens_per_call, 9, '.2f')}{fmt(r.c, 7, '.3f')}"
            f"{fmt(r.verify_cost, 7, '.2f', 'x')}{fmt(r.speedup, 9, '.2f', 'x')}"
            f"{fmt(r.predicted, 10, '.2f', 'x')}{fmt(r.ratio, 10, '.2f')}"
            f"{fmt(r.predicted_verify, 12, '.2f', 'x')}"
        )
    lines += [
        "",
        f"{'method':<40}{'per-prompt speedup min / median / max':>40}{'repeated 4-grams':>18}"
        f"{'differ':>8}",
        "-" * 106,
    ]
    for r in rows:
        spread = "—" if r.spread is None else " / ".join(f"{x:.2f}x" for x in r.spread)
        differ = "—" if r.mismatches is None else str(r.mismatches)
        lines.append(f"{r.method:<40}{spread:>40}{fmt(r.repeated_4grams, 18, '.2f')}{differ:>8}")
    lines += [
        "",
        f"{'where a step goes (ms per target call)':<40}{'draft':>9}{'target':>9}{'loop':>9}"
        f"{'total':>9}",
        "-" * 76,
    ]
    for r in rows:
        if r.step_ms and (r.gamma or r.method.startswith("autoregressive")):
            ms = r.step_ms
            lines.append(
                f"{r.method:<40}{ms['draft']:>9.2f}{ms['target']:>9.2f}{ms['loop']:>9.2f}"
                f"{sum(ms.values()):>9.2f}"
            )
    lines += [
        "draft: forwards and sampling inside the drafter; target: the target's forwards (the",
        "verification); loop: everything else (acceptance rule, bookkeeping).",
        "",
        "c and verify are measured inside the decoding loop: c = time per draft forward / time per",
        "target forward in autoregressive decoding on the same runtime; verify = time per target",
        "forward over γ+1 tokens / the same. predicted = (1-α^(γ+1))/((1-α)(γc+1)) (Leviathan et",
        "al.); pred+verify replaces the paper's free verification (the +1) by the measured verify",
        "cost. Speedups are over our autoregressive decoding on the first runtime at the same",
        "temperature. repeated 4-grams: median over outputs of the fraction of 4-grams that repeat",
        "an earlier one. differ: greedy outputs (prompts x repeats) not equal to autoregressive",
        "decoding's. lean = our forward with a preallocated KV cache (specdec_lab.llama); hf =",
        "transformers' eager forward with a DynamicCache.",
    ]
    for rt, c in costs.items():
        lines.append(
            f"Isolated forwards ({rt}, min of 7): draft {c['t_draft_ms']:.2f} ms, target "
            f"{c['t_target_ms']:.2f} ms (c = {c['c']:.3f}), target over γ+1 tokens "
            f"{c['verify_cost']:.2f}x one token."
        )
    return "\n".join(lines)


def summarize(rows: list[Row]) -> dict[str, float]:
    """The headline ratios: the best greedy and the best sampled row (any method, any runtime)
    against our autoregressive decoding, the best greedy row against HF assisted generation and
    HF generate, and our autoregressive decoding against HF generate."""
    by_name = {r.method: r for r in rows}
    ours = [r for r in rows if "(ours" in r.method and not r.method.startswith("autoregressive")]
    best = max((r for r in ours if r.temperature == 0), key=lambda r: r.tokens_per_s)
    out = {"best_greedy": best.method, "speedup_vs_autoregressive": best.speedup}
    for name, key in (
        ("HF assisted (default schedule)", "speedup_vs_hf_assisted"),
        ("HF generate (greedy)", "speedup_vs_hf_generate"),
    ):
        if name in by_name:
            out[key] = best.tokens_per_s / by_name[name].tokens_per_s
    if "HF generate (greedy)" in by_name:
        out["ours_ar_vs_hf_generate"] = (
            rows[0].tokens_per_s / by_name["HF generate (greedy)"].tokens_per_s
        )
    out["measured_over_predicted"] = best.ratio
    for t in sorted({r.temperature for r in ours if r.temperature > 0}):
        top = max((r for r in ours if r.temperature == t), key=lambda r: r.tokens_per_s)
        out[f"best_T{t:g}"] = top.method
        out[f"speedup_T{t:g}"] = top.speedup
    return out


def reduced_precision_note(rows: list[Row], dtype: torch.dtype) -> str | None:
    """One line on greedy outputs that differ from autoregressive decoding, outside float32."""
    if dtype == torch.float32:
        return None
    differ = [r for r in rows if r.mismatches]
    if not differ:
        return f"{dtype}: every greedy output equals autoregressive decoding's on these prompts."
    outputs = len(rows[0].samples) * len(rows[0].prompt_tokens_per_s)  # repeats x prompts
    counts = ", ".join(f"{r.method} {r.mismatches}" for r in differ)
    return (
        f"{dtype}: greedy outputs (of {outputs}) that differ from autoregressive decoding: "
        f"{counts}. Batched verification rounds differently from one-token forwards in "
        "reduced precision, so near-ties can flip; exactness is asserted in float32 only."
    )


README_START = "<!-- speed: generated by `python -m specdec_lab bench --markdown` -->"
README_END = "<!-- speed: end -->"


def markdown_table(record: dict) -> str:
    """The README's speed table from a saved bench record (`records.load_results`): each
    method's greedy and T = 1 rows (speculative decoding at each temperature's own best γ),
    tokens/s and speedup over our autoregressive decoding on the first runtime, then the costs."""
    info, res = record["device_info"], record["results"]
    rows = res["rows"]

    def best(prefix: str, temperature: float, runtime: str | None = None) -> dict | None:
        found = [
            r
            for r in rows
            if r["method"].startswith(prefix)
            and r["temperature"] == temperature
            and (runtime is None or r["runtime"] == runtime)
        ]
        return max(found, key=lambda r: r["tokens_per_s"]) if found else None

    def cell(r: dict | None) -> str:
        if r is None:
            return "—"
        gamma = f" (γ={r['gamma']})" if r["gamma"] else ""
        alpha = f", α {r['alpha']:.2f}" if r.get("alpha") is not None else ""
        return f"{r['tokens_per_s']:.0f} tok/s, **{r['speedup']:.2f}x**{gamma}{alpha}"

    lines = [
        f"Recorded {record['created'][:10]} on {info.get('gpu', info['cpu'])} "
        f"({info['device']}, {info['torch_threads']} thread(s), torch {info['torch']}, "
        f"transformers {info['transformers']}), {res['pair']}, {res['dtype']}; "
        f"{res['config']['n_prompts']} {res['config']['domain']} prompts x "
        f"{res['config']['max_new_tokens']} tokens, medians of {res['config']['repeats']}.",
        "",
        "| method | runtime | greedy | T = 1 |",
        "|---|---|---|---|",
    ]
    runtimes = list(dict.fromkeys(r["runtime"] for r in rows if "(ours" in r["method"]))
    for rt in runtimes:
        for prefix, label in (("autoregressive", "autoregressive"), ("speculative", "speculative")):
            lines.append(f"| {label} (ours) | {rt} | {cell(best(prefix, 0.0, rt))} | "
                         f"{cell(best(prefix, 1.0, rt))} |")  # fmt: skip
    for prefix in ("prompt lookup", "heuristic", "lookup, else draft", "draft head", "tree"):
        greedy, sampled = best(prefix, 0.0), best(prefix, 1.0)
        if greedy is not None:
            name = greedy["method"].split(" (ours")[0]
            lines.append(f"| {name} | {greedy['runtime']} | {cell(greedy)} | {cell(sampled)} |")
    for name in ("HF generate (greedy)", "HF assisted (default schedule)", "HF prompt lookup"):
        r = best(name, 0.0)
        if r is not None:
            lines.append(f"| transformers: {name} | hf | {cell(r)} | — |")
    summary = res["summary"]
    lines += [
        "",
        "Speedups are over our autoregressive decoding on the first runtime at the same "
        "temperature. Best greedy: "
        f"{summary['best_greedy']}, {summary['speedup_vs_autoregressive']:.2f}x; over HF assisted "
        f"generation {summary.get('speedup_vs_hf_assisted', float('nan')):.2f}x; our "
        f"autoregressive decoding over HF generate {summary.get('ours_ar_vs_hf_generate', float('nan')):.2f}x. "
        f"Best at T = 1: {summary.get('best_T1', '—')}, {summary.get('speedup_T1', float('nan')):.2f}x.",
    ]
    for rt, c in res["costs"].items():
        lines.append(
            f"Isolated forwards on {rt}: draft {c['t_draft_ms']:.2f} ms, target "
            f"{c['t_target_ms']:.2f} ms (c = {c['c']:.3f}), verifying γ+1 tokens "
            f"{c['verify_cost']:.2f}x one token."
        )
    return "\n".join(lines)
