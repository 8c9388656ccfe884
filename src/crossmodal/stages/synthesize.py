"""Stage `synthesize`: render the synthetic image world in the real formats (a note under the real profile)."""
from __future__ import annotations

from pathlib import Path

from .. import paths
from ..config.data import REAL_DATA
from ..config.loader import to_dict
from ..io import atomic_path, write_json
from ..pipeline import manifests
from ..stage_common import progress, real, record_environment, skipped_under_real_profile


def run(cfg, root: Path, args) -> None:
    if real(cfg):
        with atomic_path(root / paths.WORLD) as tmp:
            skipped_under_real_profile(tmp / "PROFILE.json", "not generated: profile real reads the published COCO files")
        manifests.write(root / paths.WORLD)
        write_json(root / paths.METRICS / "data_profile.json", {"profile": REAL_DATA, "synthetic": False,
                                                                "environment": record_environment()})
        return
    from ..worlds.image_world import generate

    summary = generate(cfg.world, root / paths.WORLD, progress=progress(cfg))
    manifests.write(root / paths.WORLD)
    write_json(root / paths.METRICS / "data_profile.json", {
        "profile": "synthetic image world",
        "synthetic": True,
        "images": to_dict(cfg.world.images),
        "image_size": cfg.world.image_size,
        "seed": cfg.world.seed,
        "summary": summary,
        "environment": record_environment(),
    })
