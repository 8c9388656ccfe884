"""HOCA's stage commands (`python -m crossmodal hoca-figures`, `hoca-cost`; the CLI finds them here)."""
