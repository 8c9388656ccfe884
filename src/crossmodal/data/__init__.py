"""Readers and writers of the real data formats, and the named inputs models consume."""
