"""Stage `hoca_figures` of the HOCA pipeline: the paper's Figs. 5-7 from our runs (papers/hoca/figures.py), three
PNGs in `--out`, and a JSON summary of what they show on stdout.

- Fig. 5 reads the test CIDEr-D of each `--ranks` system (L-HOCA-UBT at rank k) and of `--full` (HOCA-UBT);
- Fig. 6 the validation history of each `--curves` system;
- both read a system's seeds too, where params.yaml trains them (`seeds: n`), and draw their mean ± sd;
- Fig. 7 decodes the first test clip of the first `--maf` system's vocabulary with each `--maf` system (their model
  files, vocabularies and feature sets: papers/hoca/paper.py `maf_reads`).

The data each figure names comes from the vocabulary's corpus of its first system ("MSVD-like synthetic video world"
under the synthetic profile)."""
from __future__ import annotations

import json
from pathlib import Path

from .... import paths
from ....io import InputError
from ....stage_common import real, set_threads

ARGUMENTS = {"--out": "folder of the three PNGs (reports/hoca_figures)",
             "--ranks": "Fig. 5: comma-separated rank:system pairs of L-HOCA-UBT, e.g. 1:l_hoca_ubt_msvd,2:...",
             "--full": "Fig. 5: the HOCA-UBT system drawn as the horizontal line",
             "--curves": "Fig. 6: comma-separated systems whose validation curves are drawn",
             "--maf": "Fig. 7: comma-separated systems (the paper's HOCA-U, HOCA-UBT) that caption one test clip"}


def _systems(cfg, text: str, flag: str) -> list[str]:
    """The comma-separated system names of `flag`, each a system of params.yaml, none twice."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or len(set(names)) != len(names):
        raise InputError(f"{flag}: expected distinct comma-separated system names, got {text!r}")
    unknown = [n for n in names if n not in cfg.systems()]
    if unknown:
        raise InputError(f"{flag}: unknown system(s) {', '.join(unknown)}; params.yaml trains "
                         f"{', '.join(sorted(cfg.systems())) or 'none'}")
    return names


def _ranks(cfg, text: str) -> list[tuple[int, str]]:
    """--ranks "1:a,2:b" -> [(1, "a"), (2, "b")]."""
    pairs = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        rank, _, name = item.partition(":")
        if not rank.strip().isdigit() or not name.strip():
            raise InputError(f"--ranks: {item!r} is not rank:system (e.g. 1:l_hoca_ubt_msvd)")
        pairs.append((int(rank), name.strip()))
    _systems(cfg, ",".join(n for _, n in pairs), "--ranks")
    return pairs


def _data(cfg, system: str) -> str:
    from ..figures import data_label

    return data_label(cfg.vocabularies[cfg.model_of(system).vocabulary].corpus, real(cfg))


def _label(cfg, system: str) -> str:
    """The legend's name of a system: the paper's model name and the system's, e.g. "HOCA-U (hoca_u_msrvtt)" (the
    system's name alone when it is not a HOCA model)."""
    from ....config.loader import build
    from ..figures import hoca_label

    spec = cfg.model_of(system)
    if spec.model != "hoca":
        return system
    from ....models.hoca import HOCAArgs

    return f"{hoca_label(build(HOCAArgs, spec.model_args, f'{cfg.where(cfg.model_name(system))}.model_args'))} " \
           f"({system})"


def seed_files(cfg, metrics: Path):
    """A function giving a system's metrics files: its own, then its seeds' (claims.seed_groups), which Figs. 5 and 6
    draw as mean ± sd."""
    from ....reports.claims import seed_groups

    groups = seed_groups(cfg)
    return lambda system: [metrics / f"{name}.json" for name in groups.get(system, (system,))]


def run(cfg, root: Path, args) -> None:
    from .. import figures as figs

    ranks, full = _ranks(cfg, args.ranks), _systems(cfg, args.full, "--full")
    curves, maf = _systems(cfg, args.curves, "--curves"), _systems(cfg, args.maf, "--maf")
    if len(full) != 1:
        raise InputError(f"--full: one system (HOCA-UBT), got {len(full)}")
    not_hoca = [s for s in maf if cfg.model_of(s).model != "hoca"]
    if not_hoca:
        raise InputError(f"--maf: {', '.join(not_hoca)} not a HOCA model (model: hoca); Fig. 7 draws HOCA's β")
    set_threads(cfg)
    out, metrics = root / args.out, root / paths.METRICS
    seeds = seed_files(cfg, metrics)
    fig5 = figs.rank_png([(k, seeds(n)) for k, n in ranks], seeds(full[0]), _data(cfg, full[0]))
    labels = {_label(cfg, s): s for s in curves}
    fig6 = figs.curves_png({label: seeds(s) for label, s in labels.items()}, _data(cfg, curves[0]))
    clip, panels = None, []
    for system in maf:
        clip, panel = figs.load_maf(cfg, root, system, clip, _label(cfg, system))
        panels.append(panel)
    fig7 = figs.maf_png(panels, clip, _data(cfg, maf[0]))
    files = [figs.write_png(out / name, png) for name, png in ((figs.FIG5, fig5), (figs.FIG6, fig6),
                                                               (figs.FIG7, fig7))]
    print(json.dumps(summary(figs, metrics, files, ranks, full[0], labels, clip, panels)))


def summary(figs, metrics: Path, files: list[Path], ranks, full: str, labels: dict[str, str], clip: int,
            panels) -> dict:
    """What the figures show, in numbers: Fig. 5's test CIDEr-D x100 per rank and HOCA-UBT's, Fig. 6's best epoch
    and validation CIDEr-D x100 per system, Fig. 7's clip, captions and β per word (rounded)."""
    from ....reports.figures import read_curves

    scale = figs.SCALE
    best = {s: read_curves(metrics / f"{s}.json", s) for s in labels.values()}
    return {
        "files": [f.name for f in files],
        "fig5": {"ranks": {str(k): {"system": n, "test_CIDEr": round(figs.read_test_cider(metrics / f"{n}.json")
                                                                    * scale, 2)} for k, n in ranks},
                 "full": {"system": full, "test_CIDEr": round(figs.read_test_cider(metrics / f"{full}.json") * scale,
                                                               2)}},
        "fig6": {s: {"best_epoch": c.best_epoch, "val_CIDEr": round(c.best_value * scale, 2), "epochs": len(c.rows)}
                 for s, c in best.items()},
        "fig7": {"clip": clip, "columns": list(figs.MODALITIES),
                 "captions": {p.label: {"words": list(p.words), "beta": [[round(float(v), 3) for v in row]
                                                                         for row in p.beta]} for p in panels}},
    }
