"""Tasks (captioning, VQA, grounding): what each supplies to the shared trainer; objectives/: captioning's losses."""
