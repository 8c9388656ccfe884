"""Stage `synthesize_video`: the video world (worlds/video_world.py) as the files of its two datasets,
data/raw/video_world/msvd/ (MSVD's layout) and data/raw/video_world/msrvtt/ (MSR-VTT's), and the tables' data
profile of HOCA's papers (reports/metrics/video_profile.json: clips per split of each dataset). Under the real
profile a note: MSVD and MSR-VTT come from their downloads."""
from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from ..config.data import VIDEO_DATASETS
from ..io import atomic_path, write_json
from ..pipeline import manifests
from ..stage_common import progress, real, record_environment, skipped_under_real_profile

PROFILE = paths.METRICS / "video_profile.json"


def run(cfg, root: Path, args) -> None:
    if real(cfg):
        with atomic_path(root / paths.VIDEO_WORLD) as tmp:
            skipped_under_real_profile(tmp / "PROFILE.json", "not generated: profile real reads MSVD and MSR-VTT")
        manifests.write(root / paths.VIDEO_WORLD)
        write_json(root / PROFILE, {"profile": "MSVD and MSR-VTT (user-extracted features)", "synthetic": False,
                                    "environment": record_environment()})
        return
    from ..worlds.video_world import write_dataset

    world = cfg.video.world
    counts = {}
    with atomic_path(root / paths.VIDEO_WORLD) as tmp:
        for dataset in VIDEO_DATASETS:
            clips = write_dataset(world, dataset, tmp / dataset, progress=progress(cfg))
            counts[f"{dataset}-like clips"] = {s: sum(c.split == s for c in clips) for s in ("train", "val", "test")}
    manifests.write(root / paths.VIDEO_WORLD)
    write_json(root / PROFILE, {"profile": "synthetic video world", "synthetic": True, **counts,
                                "frames": world.frames, "fps": world.fps, "seed": world.seed,
                                "environment": record_environment()})
    print(json.dumps(counts))
