"""Stage `<ensemble>` of a paper's pipeline: decode the test split with trained systems together (params.yaml
`<paper>.ensembles`: beam search over their averaged log-probabilities, the papers' Σ rows)."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..io import InputError, write_json
from ..stage_common import record_environment, set_threads

ARGUMENTS = {"--name": "a key of `<paper>.ensembles` in params.yaml"}


def run(cfg, root: Path, args) -> None:
    from ..tracking import Run

    name = args.name
    ensembles = cfg.ensembles()
    if name not in ensembles:
        raise InputError(f"unknown ensemble {name!r}; params.yaml declares: {', '.join(sorted(ensembles))}")
    members = ensembles[name].members
    params = {"ensemble": name, "members": ",".join(members), "beam_size": cfg.beam_size(name)}
    with Run(cfg.stage(name), params, run_name=name) as run:
        from ..metrics.captions import evaluate_captions, start_meteor
        from ..models.ensemble import Ensemble
        from ..models.registry import build_model, load_state, read_model_file
        from ..tasks.captioning import CaptionData, decode_split, write_captions
        from ..training.distributed import resolve_device

        set_threads(cfg)
        start_meteor()  # its JVM loads while the members decode
        system, device = cfg.model_of(members[0]), resolve_device(cfg.compute)
        data = CaptionData(cfg, root, system.vocabulary, cfg.ensemble_inputs(name), ("test",))
        models = []
        for member in members:
            path = root / paths.MODELS / member / "model.pt"
            _, saved = read_model_file(path, cfg.stage(member))
            model = build_model(cfg.where(cfg.model_name(member)), cfg.model_of(member), len(data.words), data.dims)
            models.append(load_state(model, saved.get("state_dict", {}), path, member).to(device))
        ev, refs = cfg.evaluation, data.refs["test"]
        predictions = decode_split(Ensemble(models), data.inputs["test"], data.words, cfg.beam_size(name),
                                   ev.max_length, ev.batch_size)
        metrics = write_captions(cfg, root, name, run, refs, {
            "variant": name, "model": "+".join(dict.fromkeys(cfg.model_of(m).model for m in members)), "objective": cfg.systems()[members[0]].objective,
            "members": list(members), "predictions": predictions, "test": evaluate_captions(predictions, refs)},
            data.corpus)
        environment = record_environment(run, str(device))
        write_json(root / paths.METRICS / f"{name}.json",
                   {**metrics, "environment": environment, "mlflow_run_id": run.run_id})
