"""Why a pair cannot be used here, each error with a one-sentence message."""

from __future__ import annotations


class PairUnavailableError(RuntimeError):
    """A pair cannot be used on this machine; the message says why in one sentence."""


class HubUnavailableError(PairUnavailableError):
    """A hub model was requested but the Hugging Face hub cannot be reached."""


class InsufficientMemoryError(PairUnavailableError, MemoryError):
    """A model does not fit in the device's free memory (estimated, or out of memory on load)."""
