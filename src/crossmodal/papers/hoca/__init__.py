"""Low-Rank HOCA's package (paper.py says what it holds)."""
