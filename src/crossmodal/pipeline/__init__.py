"""The pipeline machinery: what runs the stages and decides what DVC may reuse, not what the stages compute.

- repro.py: `python -m crossmodal.pipeline.repro`, the scheduler: `dvc repro`, several stages at a time;
- times.py: the scheduler's log of each stage's and each run's seconds;
- stage_server.py, stage_client.py: one process that has imported torch, MLflow and DVC forks the stages' commands;
- closures.py: each stage's code closure, the source files its one code dependency lists;
- manifests.py: the worlds' manifests, which stand for a world's folder among the deps of the stages that read it.

None of it changes a stage's results: the same params give the same bits with or without it. Every stage command
imports this package (its client, through crossmodal/__main__.py), so this file imports nothing.
"""
