"""Stage `pretrain_backbone`: the small CNN + RoI head trained on the world's classes and attributes (a note
under the real profile, which converts published features instead)."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config.loader import flatten
from ..io import save_torch, write_json
from ..pipeline import manifests
from ..stage_common import progress, real, record_environment, set_threads, skipped_under_real_profile


def run(cfg, root: Path, args) -> None:
    if not real(cfg):
        manifests.check(root / paths.WORLD)  # the world this stage reads, as its manifest lists it
    if real(cfg):
        note = "not trained: profile real converts the published bottom-up-attention features"
        save_torch({"profile": "real", "note": note}, root / paths.BACKBONE)
        skipped_under_real_profile(root / paths.METRICS / "backbone.json", note)
        return
    from ..tracking import Run

    with Run("pretrain_backbone", flatten(cfg.backbone, "backbone")) as run:  # starts MLflow first
        from ..features.backbone import pretrain

        set_threads(cfg)
        result = pretrain(cfg.backbone, root / paths.WORLD, root / paths.BACKBONE, progress=progress(cfg))
        for epoch, loss in enumerate(result.get("train_loss", []), 1):
            run.log_metrics({"train_loss": loss}, step=epoch)
        run.log_metrics({f"val_accuracy_{k}": v for k, v in result["accuracy"].items()})
        run.log_metrics({"train_seconds": result.pop("seconds")})  # timings stay out of the DVC metrics
        write_json(root / paths.METRICS / "backbone.json",
                   {"mlflow_run_id": run.run_id, **result, "environment": record_environment(run)})
