"""The shared baselines: a package like a paper's (paper.py says what it holds)."""
