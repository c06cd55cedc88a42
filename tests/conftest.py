"""Shared fixtures. The tests use tiny tensors, for which one thread per worker is fastest."""

from pathlib import Path

import pytest
import torch

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
KERNEL_DIED = "Kernel died before replying to kernel_info"  # jupyter_client's start-up error

torch.set_num_threads(1)


@pytest.fixture
def gen() -> torch.Generator:
    """A fresh seeded generator per test: tests never depend on each other's draws."""
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def run_notebook():
    """`run(nb, **nbclient_options) -> executed nb`: every cell but those nbval skips, in a fresh
    python3 kernel started in notebooks/ (it inherits this process's environment); nbclient
    raises CellExecutionError on the first failing cell unless told otherwise. The skipped cell
    is the live widget: NB04 once hung there with the kernel idle (cf. jupyter/nbclient#312), and
    `make browser-test` drives it instead.

    A kernel that dies before its first reply is started again, twice at most: jupyter_client
    picks free TCP ports and the kernel binds them later, so two workers starting kernels at
    once can race for one port (a clean-clone CI run lost notebook 02 to "ZMQError: Address
    already in use"). No cell has run then; any other failure raises at once."""

    def run(nb, **kwargs):
        from nbclient import NotebookClient  # looked up at each run: a test can stand one in

        options = dict(
            kernel_name="python3",
            timeout=600,
            resources={"metadata": {"path": str(NOTEBOOKS)}},
            skip_cells_with_tag="nbval-skip",
        )
        for _ in range(2):
            try:
                return NotebookClient(nb, **(options | kwargs)).execute()
            except RuntimeError as err:
                if KERNEL_DIED not in str(err):
                    raise
        return NotebookClient(nb, **(options | kwargs)).execute()  # the third start raises

    return run


@pytest.fixture(scope="module")
def micro():
    """A 2-layer Llama of vocabulary 32, hidden size 32: a real transformers model in a second."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.1,  # random, but smooth enough for a head to learn in seconds
        bos_token_id=0,
        eos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()
