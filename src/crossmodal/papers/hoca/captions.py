"""HOCA's figure files and the index's caption of each (figures.py draws them): what it shows and what not.

A module of its own so that the `index` stage, which prints the captions, does not import the figures' code and
what that imports (the video features' readers): a stage's code closure is every module it may import
(pipeline/closures.py).
"""
from __future__ import annotations

from pathlib import Path

FOLDER = Path("reports/hoca_figures")  # HOCA's Figs. 5-7 (stage hoca_figures), listed by the index
FIGURE_FILES = {"Fig. 5: CIDEr-D by rank": FOLDER / "hoca_fig5_rank.png",
                "Fig. 6: learning curves": FOLDER / "hoca_fig6_curves.png",
                "Fig. 7: MAF weights": FOLDER / "hoca_fig7_maf.png"}
FIG5, FIG6, FIG7 = (path.name for path in FIGURE_FILES.values())

CAPTIONS = {  # the index's caption of each figure (reports/figures.py figure_index_lines): what it shows, what not
    FIG5: "What it shows: our test CIDEr-D (beam search) of L-HOCA-UBT at each rank k and of HOCA-UBT (the full "
          "tensor) as a line, on an axis from 0; a point is the mean of a system's seeds with ± sd bars when it has "
          "several, and is marked \"one run\" when it has one. What it does not show: a one-run point carries no "
          "spread, so gaps smaller than this world's seed spread (reports/claims.md, where measured) are not "
          "evidence of an effect of the rank; the numbers are ours on the synthetic world, not the paper's.",
    FIG6: "What it shows: validation CIDEr-D (greedy decoding) per epoch of the paper's Fig. 6 systems, on an axis "
          "from 0, each run's best epoch starred, seeds as mean ± sd where a system has several. What it does not "
          "show: test scores (beam search; the tables), or a spread for a system with one run.",
    FIG7: "What it shows: for one test clip, per word of each system's greedy caption, the hierarchical fusion's "
          "weights β over image, motion and audio (eqs. 20-21), on an axis from 0 to 1. What it does not show: which "
          "modality a word needs (β weighs context vectors the decoder then transforms), or anything across clips: "
          "one clip, one run per system.",
}
