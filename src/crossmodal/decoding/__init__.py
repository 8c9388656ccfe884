"""Greedy, sampled and beam-search decoding, written once for every captioning model."""
