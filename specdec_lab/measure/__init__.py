"""Measure: numbers about the algorithm on the machine at hand, each printed with that machine.

- `timing`: the one timing harness (min of N, synchronised; CUDA events on CUDA), and the
  costs c and r of forwards through the loops' own sessions;
- `profiling`: roofline accounting, device peaks and a ladder of Llama-shaped models;
- `records`: benchmark records under `data/results/`;
- `acceptance`: α on held-out text, for several drafts at once;
- `bench`: the side-by-side benchmark of every decoding method, with its plan in `bench_plan`
  and its tables in `bench_report`;
- `vocab_cost`: what the loop itself costs per step as the vocabulary grows;
- `preview`: a first look, one prompt decoded both ways and shown in one screen.
- `capstone`: engine-style counters (vLLM, llama.cpp), the capstone's plan and its report.

May import: the foundation, the engine, the algorithm, `proof`, `display` and `models`; nothing
that teaches or parses arguments.
"""
