"""Tasks (captioning; VQA and grounding to come): what each supplies to the shared trainer."""
