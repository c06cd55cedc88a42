"""The logits a model's own forward computes from its final hidden states.

A path that applies the LM head by hand (a draft head, a session that keeps hidden states) must
apply what the family's `forward` applies after the head, or it scores another distribution.
"""

from __future__ import annotations

import torch

LOGIT_SCALES: dict[str, tuple[str, bool]] = {
    # Families whose forward scales the logits after the LM head: model_type: (config field,
    # divide?), as each ForCausalLM.forward applies it (transformers 5.x, modeling_<family>.py).
    "cohere": ("logit_scale", False),  # logits * self.logit_scale
    "cohere2": ("logit_scale", False),
    "cohere2_moe": ("logit_scale", False),
    "granite": ("logits_scaling", True),  # logits / self.config.logits_scaling
    "granitemoe": ("logits_scaling", True),
    "granitemoeshared": ("logits_scaling", True),
    "granitemoehybrid": ("logits_scaling", True),
    "granite_swa": ("logits_scaling", True),
    "hyperclovax": ("logits_scaling", False),  # multiplies by the field Granite divides by
    "falcon_h1": ("lm_head_multiplier", False),
}


def output_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The logits `model`'s forward computes from its final (normalised) hidden states.
    hidden: (..., d) -> (..., V'), V' the width of the output embedding. After the LM head: a
    scale (`LOGIT_SCALES`: Cohere multiplies by `config.logit_scale`, Granite divides by
    `config.logits_scaling`), then soft-capping, `tanh(x / cap) · cap` with
    `config.final_logit_softcapping` (Gemma-2, Gemma-3), in the logits' own dtype. A family
    outside `LOGIT_SCALES` whose config sets one of those scale fields raises ValueError: a
    silently different distribution is worse than an error."""
    config = model.config
    logits = model.get_output_embeddings()(hidden)
    kind = getattr(config, "model_type", None)
    if kind in LOGIT_SCALES:
        field, divide = LOGIT_SCALES[kind]
        scale = getattr(config, field)
        logits = logits / scale if divide else logits * scale
    else:
        fields = {f for f, _ in LOGIT_SCALES.values()}
        unknown = sorted(f for f in fields if getattr(config, f, None) not in (None, 1, 1.0))
        if unknown and kind != "mpt":  # MPT's forward ignores its logit_scale
            raise ValueError(
                f"{type(model).__name__} ({kind}) sets config.{unknown[0]}, and specdec_lab does "
                "not know how its forward applies it; add the family to logits.LOGIT_SCALES"
            )
    cap = getattr(config.get_text_config(), "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


def scales_logits(model) -> bool:
    """Whether `model`'s forward changes the logits after its LM head (see `output_logits`)."""
    config = model.config
    return getattr(config, "model_type", None) in LOGIT_SCALES or bool(
        getattr(config, "final_logit_softcapping", None)
    )
