"""Attention mechanisms the models are built from, one file each."""
