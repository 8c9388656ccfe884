"""Synthetic worlds written in the real data formats."""
