"""ETA-Transformer: the paper's package (paper.py says what it holds)."""
