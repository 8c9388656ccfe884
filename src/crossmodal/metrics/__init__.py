"""Evaluation: caption metrics (pycocoevalcap), fast CIDEr-D, VQA accuracy, reference points."""
