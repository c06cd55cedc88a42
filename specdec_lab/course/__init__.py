"""Course: what produces the course. A learner never needs to open it.

- `checks`: the exercises' checks, each a test with power against plausible wrong answers, one
  module per notebook 00-07 (`checks.harness` holds what they share);
- `exercises`: the workshop generator (student notebooks from the solution notebooks);
- `corpus`: the training corpus, built from the Python standard library;
- `train`: training and distilling the shipped models;
- `head_training`: training the EAGLE-style draft head.

May import: everything but `cli`.
"""
