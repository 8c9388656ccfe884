"""crossmodal-repro: reproducible pipelines for five papers on cross-modal and higher-order attention."""
