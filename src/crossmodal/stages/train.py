"""Stage `<system>` of a paper's pipeline: train one system (params.yaml `<paper>.systems.<system>`) with the
shared trainer and its task; with `compute.processes` > 1 the command reruns itself under torchrun, rank 0
writing the outputs (model file, predictions, metrics file, MLflow run)."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config.loader import flatten
from ..io import InputError, write_json
from ..stage_common import progress, record_environment, set_threads
from ..task_specs import SPECS

ARGUMENTS = {"--system": "a key of `<paper>.systems` in params.yaml"}


def run(cfg, root: Path, args) -> None:
    from ..tracking import Run
    from ..training import distributed

    name = args.system
    systems = cfg.systems()
    if name not in systems:
        raise InputError(f"unknown system {name!r}; params.yaml declares: {', '.join(sorted(systems))}")
    if distributed.needs_launch(cfg.compute):
        argv = (["--params", args.params] if args.params else []) + ["train", "--system", name]
        raise SystemExit(distributed.launch(cfg.compute, argv))
    params = {"system": name, **flatten(systems[name], cfg.where(name)),
              **({"beam_size": cfg.beam_size(name)} if SPECS[systems[name].task].captions else {})}
    if systems[name].init is not None:  # the model it continues
        params.update(flatten(cfg.model_of(name), cfg.where(systems[name].init)))
    with (distributed.process_group(cfg.compute) as group,
          group.on_main(lambda: Run(cfg.stage(name), params, run_name=name)) as run):  # MLflow starts while data load
        from ..training.trainer import Trainer

        set_threads(cfg)
        trainer = Trainer(cfg, name, root, progress=progress(cfg))
        result = trainer.run(run)
        if not group.main:
            return
        trainer.save_model()
        metrics = trainer.task.write_outputs(run, result)
        environment = record_environment(run, str(trainer.device))
        write_json(root / paths.METRICS / f"{name}.json",
                   {**metrics, "environment": environment, "mlflow_run_id": run.run_id})
        trainer.checkpoint.unlink(missing_ok=True)  # finished: a rerun (new code, say) must not resume it
