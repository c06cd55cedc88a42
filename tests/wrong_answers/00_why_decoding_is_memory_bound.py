"""Plausible wrong answers to the exercise of notebooks/00_why_decoding_is_memory_bound.ipynb.

tests/course/test_exercises.py binds each one to the exercise's answer name in the student notebook and
re-runs the check cell, which must fail with an ``AssertionError("Exercise N: ...")``.
See `specdec_lab.course.exercises` for the format.
"""


def keys_only(config, bytes_per_value=2):
    """Forgets the values: one vector per head and layer instead of two."""
    head_dim = config.hidden_size // config.num_attention_heads
    return config.num_key_value_heads * head_dim * config.num_hidden_layers * bytes_per_value


def query_heads(config, bytes_per_value=2):
    """Ignores grouped-query attention: counts every query head as a key-value head."""
    return 2 * config.hidden_size * config.num_hidden_layers * bytes_per_value


def one_layer(config, bytes_per_value=2):
    """Forgets that every layer keeps its own cache."""
    head_dim = config.hidden_size // config.num_attention_heads
    return 2 * config.num_key_value_heads * head_dim * bytes_per_value


def fixed_fp16(config, bytes_per_value=2):
    """Hard-codes 2 bytes per value."""
    head_dim = config.hidden_size // config.num_attention_heads
    return 2 * config.num_key_value_heads * head_dim * config.num_hidden_layers * 2


def delegates(config, bytes_per_value=2):
    """Calls profiling.kv_cache_bytes, the function the exercise asks to write."""
    from specdec_lab.measure import profiling

    return profiling.kv_cache_bytes(config, 1, 1, bytes_per_value)


WRONG_ANSWERS = {
    "0.1": {  # two answer names: the prediction stays as the student left it
        "keys only": {"kv_bytes_per_token": keys_only},
        "query heads instead of key-value heads": {"kv_bytes_per_token": query_heads},
        "one layer": {"kv_bytes_per_token": one_layer},
        "always 2 bytes per value": {"kv_bytes_per_token": fixed_fp16},
        "delegates to profiling.kv_cache_bytes": {"kv_bytes_per_token": delegates},
    },
}
