"""Notebook 03's measurement loop: acceptance overlaps on held-out text, for several drafts at once.

One target forward and one forward per draft over each held-out window give α = Σ_x min(p, q) at
every position (`verify.acceptance_rate`), at several temperatures from the same logits. p is the
target, q the draft (Leviathan et al. 2023, arXiv:2211.17192).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from specdec_lab import sampling, verify
from specdec_lab.engine import sessions


def windows_for(pair: Any, texts: dict[str, list[str]], window: int) -> dict[str, list]:
    """The first `window` tokens of every text that is long enough, encoded by `pair`."""
    ids = {d: [pair.encode(t)[:window] for t in ts] for d, ts in texts.items()}
    return {d: [w for w in ws if len(w) == window] for d, ws in ids.items()}


def overlap_table(
    pair: Any,
    drafts: dict[str, Any],
    windows: dict[str, list[torch.Tensor]],
    temperatures: Sequence[float],
    lambdas: Sequence[float],
    progress: bool = True,
) -> dict[str, dict[str, np.ndarray]]:
    """Per domain: each draft's mean α per window and temperature, (n_windows, len(temperatures)).
    For the draft named "draft" at T = 1 also: "uniform" (α of a uniform draft), "mixture" (α of
    λ·p + (1 − λ)·q for each λ in `lambdas`), "entropy" (mean entropy of p, nats) and "positions"
    ((n_windows·L, 2): every position's entropy of p and α)."""
    vocab = pair.vocab_size
    table: dict[str, dict[str, list]] = {d: {name: [] for name in drafts} for d in windows}
    for domain, ws in windows.items():
        extra: dict[str, list] = {"uniform": [], "mixture": [], "entropy": [], "positions": []}
        for ids in tqdm(ws, desc=f"{domain} windows", disable=not progress):
            p_logits = sessions.open_session(pair.target, vocab).logits(ids)  # (L, V)
            for name, draft in drafts.items():
                q_logits = sessions.open_session(draft, vocab).logits(ids)  # (L, V)
                row = []
                for t in temperatures:
                    p = sampling.logits_to_probs(p_logits, t)  # (L, V)
                    q = sampling.logits_to_probs(q_logits, t)  # (L, V)
                    alpha = verify.acceptance_rate(p, q)  # (L,)
                    row.append(alpha.mean().item())
                    if name == "draft" and t == 1.0:
                        entropy = -(p * p.clamp_min(1e-30).log()).sum(-1)  # (L,) nats
                        uniform = torch.full_like(q, 1 / vocab)
                        extra["uniform"].append(verify.acceptance_rate(p, uniform).mean().item())
                        extra["mixture"].append(
                            [
                                verify.acceptance_rate(p, lam * p + (1 - lam) * q).mean().item()
                                for lam in lambdas
                            ]
                        )
                        extra["entropy"].append(entropy.mean().item())
                        extra["positions"].append(torch.stack([entropy, alpha], 1))  # (L, 2)
                table[domain][name].append(row)
        table[domain] |= extra
    out = {d: {k: np.array(v) for k, v in t.items() if k != "positions"} for d, t in table.items()}
    for d in out:
        out[d]["positions"] = torch.cat(table[d]["positions"]).cpu().numpy()  # (n_windows·L, 2)
    return out


def mean_se(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over windows (axis 0) and its standard error, windows as independent units."""
    x = np.asarray(x)
    return x.mean(0), x.std(0, ddof=1) / np.sqrt(x.shape[0])


def gap(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """mean(a) − mean(b) for independent per-window (or per-prompt) values, with its SE."""
    (ma, sa), (mb, sb) = mean_se(np.asarray(a)), mean_se(np.asarray(b))
    return ma - mb, np.hypot(sa, sb)


def training_budget(training: dict[str, Any], name: str) -> tuple[float, float]:
    """(minutes, million tokens) of distillation against the target that `name` received, over
    all its recorded stages (data/models/training.json, "models")."""
    record = training.get(name, {})
    stages = [record] + list(record.get("earlier_stages", {}).values())
    minutes = sum(s.get("train_config", {}).get("minutes", 0.0) for s in stages)
    tokens = sum(s.get("tokens_seen", 0) for s in stages)
    return float(minutes), tokens / 1e6
