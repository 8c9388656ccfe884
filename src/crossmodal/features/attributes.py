"""The attribute detector (Fang et al. 2015, "From captions to visual concepts and back", as ETA §5.2 uses it):
multiple-instance learning with a noisy-OR, fine-tuned from the backbone, over the K most frequent caption words.

An image is a bag of instances, the cells of the backbone's last convolutional map pooled to the grid
(`grid.size` x `grid.size`, features/grid.py). For word w and cell j the detector gives

    p_j^w = sigmoid(v_w . phi(f_j) + u_w)                                  (instance probability)
    P^w   = 1 - prod_j (1 - p_j^w)                                          (noisy-OR, Fang et al. eq. 1)

with phi a ReLU layer (Fang's fc6/fc7 convolutionalised; here one hidden layer of `hidden_dim`) and f_j the
cell's feature from the backbone's trunk, which is fine-tuned at its own, smaller learning rate. The bag's label
for w is 1 when w occurs in any of the image's captions ("weak labels generated from the ground-truth captions",
ETA §5.3), and the loss is the binary cross-entropy of P^w, summed over words and averaged over images.
log(1 - P^w) = -sum_j softplus(logit_j^w) is computed in that form, so the product never underflows.

Under the real profile the trunk is ImageNet's VGG-16 up to conv5_3 (features/vgg.py: the images resized to
224 x 224, conv5 14 x 14 pooled to the grid's 7 x 7 cells), fine-tuned the same way, and the images are read from
disk per batch (`ImageFiles`). Fang et al. run VGG-16 fully convolutionally with fc6 and fc7 as convolutions on
565 x 565 images (a 12 x 12 map of instances); ours keeps the synthetic profile's head (one new hidden layer on the
pooled cells), so both profiles train one detector.

Vocabulary: the `words` (K) most frequent words of the training captions (tokenised as the caption vocabulary
`vocabulary` is) that are in that vocabulary and not in `exclude`; ties by word. Fang et al. keep K = 1000 on
COCO; the synthetic world has fewer words, so K is sized for it in params.yaml.

Training: Adam, at most `epochs` epochs, the epoch with the best validation mAP kept (test is never looked at while
training); with `patience` > 0 the run ends by the trainer's early-stopping rule (stopping.py) on
validation mAP: `patience` epochs without a gain of more than `min_delta`, never on a new best. Patience 0 runs
every epoch, as Fang et al.'s fixed schedule. Evaluation on test: precision@k (the mean over images of the share
of the `top_k` detected words that occur in the image's captions) and mAP (the mean over words with a positive
test image of the average precision of ranking the test images by P^w).

Outputs, two feature sets in the region layout (data/regions.py), one row per attribute, (word id in the caption
vocabulary, probability), each with the whole image as its box:
- `attributes`: the `top_k` detected words of every image, most probable first. Every split gets detected words,
  training included ("in the training stage, we use the detected semantic attributes rather than the ground
  truth", ETA §5.2), so no model ever sees ground-truth attributes except the oracle.
- `attributes_oracle`: the image's own caption words, the `top_k` vocabulary words most frequent in its
  references (ties by detector-vocabulary rank), probability 1: ETA^oracle's "semantic attributes tokenized from
  the ground truth captions" (Table 2), a perfect detector.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

from ..config.features import AttributesConfig
from ..data.captions import sentence_tokens
from ..data.karpathy import KarpathyImage
from ..data.regions import write_region_file
from ..io import InputError
from ..stopping import BestWeights
from .grid import grid_features

EVAL_BATCH = 128


class ImageFiles:
    """The images of a split read from disk per batch (`files[rows]`, rows a tensor of indices or a slice) by
    `load(path) -> (image tensor, size)`: COCO's images do not fit in memory."""

    def __init__(self, paths: list[Path], load: Callable[[Path], tuple[torch.Tensor, tuple[int, int]]]):
        self.paths, self.load = paths, load

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, rows) -> torch.Tensor:
        chosen = self.paths[rows] if isinstance(rows, slice) else [self.paths[int(k)] for k in rows]
        return torch.stack([self.load(path)[0] for path in chosen])


def detector_words(images: list[KarpathyImage], caption_words: list[str], cfg: AttributesConfig) -> list[str]:
    """The detector's vocabulary: the K most frequent training-caption words in the caption vocabulary, less
    `exclude`, most frequent first (ties by word)."""
    known, skip = set(caption_words), set(cfg.exclude.split())
    counts = Counter(w for im in images if im.split == "train" for s in im.sentences
                     for w in sentence_tokens(s.tokens, s.raw) if w in known and w not in skip)
    if not counts:
        raise InputError("attribute detector: no training-caption word is left for its vocabulary")
    return sorted(counts, key=lambda w: (-counts[w], w))[:cfg.words]


def word_labels(images: list[KarpathyImage], words: list[str]) -> np.ndarray:
    """[N, K] float32: 1 where word k occurs in any caption of image n."""
    index = {w: k for k, w in enumerate(words)}
    labels = np.zeros((len(images), len(words)), dtype=np.float32)
    for n, im in enumerate(images):
        for s in im.sentences:
            for w in sentence_tokens(s.tokens, s.raw):
                if w in index:
                    labels[n, index[w]] = 1.0
    return labels


def oracle_words(image: KarpathyImage, words: list[str], top_k: int) -> list[str]:
    """The `top_k` detector-vocabulary words most frequent in the image's captions (ties by vocabulary rank)."""
    rank = {w: k for k, w in enumerate(words)}
    counts = Counter(w for s in image.sentences for w in sentence_tokens(s.tokens, s.raw) if w in rank)
    return sorted(counts, key=lambda w: (-counts[w], rank[w]))[:top_k]


class AttributeDetector(nn.Module):
    """The backbone's trunk (fine-tuned), pooled to the grid's cells, then the MIL head: per cell and word a
    logit, v_w . ReLU(W f_j + b) + u_w."""

    def __init__(self, backbone: nn.Module, grid_size: int, words: int, hidden_dim: int):
        super().__init__()
        self.backbone, self.grid_size = backbone, grid_size
        channels = getattr(backbone, "channels", None) or backbone.trunk[-1][0].out_channels  # VGG-16's, or ours
        self.hidden = nn.Sequential(nn.Linear(channels, hidden_dim), nn.ReLU())
        self.words = nn.Linear(hidden_dim, words)

    def cell_logits(self, images: torch.Tensor) -> torch.Tensor:
        """[N, cells, K] instance logits."""
        return self.words(self.hidden(grid_features(self.backbone.feature_map(images), self.grid_size)))


def noisy_or_log(cell_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log P^w, log(1 - P^w)) [N, K] of the noisy-OR over the cells (dim 1), stable in both tails."""
    log_none = -F.softplus(cell_logits).sum(1)  # log prod_j (1 - p_j) = sum_j log sigmoid(-l_j)
    log_any = torch.log(-torch.expm1(log_none.clamp(max=-torch.finfo(log_none.dtype).tiny)))  # never log 0
    return log_any, log_none


def mil_loss(cell_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the noisy-OR image probabilities, summed over words, averaged over images."""
    log_any, log_none = noisy_or_log(cell_logits)
    return -(labels * log_any + (1 - labels) * log_none).sum(1).mean()


def average_precision(scores: np.ndarray, positives: np.ndarray) -> float:
    """AP of ranking items by `scores` (descending; ties by index) against boolean `positives`."""
    order = np.argsort(-scores, kind="stable")
    hits = positives[order].astype(np.float64)
    precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
    return float((precision * hits).sum() / hits.sum())


def detection_metrics(probs: np.ndarray, labels: np.ndarray, top_k: int) -> dict[str, float]:
    """precision@top_k (mean over images) and mAP (mean over words with a positive image)."""
    top = np.argsort(-probs, axis=1, kind="stable")[:, :top_k]
    precision = float(np.take_along_axis(labels, top, 1).mean())
    aps = [average_precision(probs[:, k], labels[:, k] > 0) for k in range(labels.shape[1]) if labels[:, k].any()]
    return {f"precision_at_{top_k}": precision, "mAP": float(np.mean(aps)), "words_with_positives": len(aps)}


@torch.no_grad()
def predict(model: AttributeDetector, images: torch.Tensor) -> np.ndarray:
    """[N, K] noisy-OR probabilities P^w."""
    model.eval()
    out = [noisy_or_log(model.cell_logits(images[lo:lo + EVAL_BATCH]))[0].exp()
           for lo in range(0, len(images), EVAL_BATCH)]
    return torch.cat(out).numpy() if out else np.zeros((0, model.words.out_features), np.float32)


def train_detector(cfg: AttributesConfig, grid_size: int, backbone: nn.Module,
                   load_images: Callable[[list[KarpathyImage]], torch.Tensor | ImageFiles],
                   captions: list[KarpathyImage], sizes: dict[int, tuple[int, int]], caption_words: list[str],
                   out_paths: dict[str, Path], log: Callable[[dict, int], None] = lambda m, s: None,
                   progress: bool = True) -> dict:
    """Train the detector on the train split, keep its best validation epoch, write both attribute feature sets
    and return its test metrics with the training history. `load_images(items)` gives the images of a split (a
    tensor, or `ImageFiles` read per batch) as the backbone takes them; `sizes` each image's (width, height)."""
    start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    words = detector_words(captions, caption_words, cfg)
    splits = {s: [im for im in captions if im.split == s] for s in ("train", "val", "test")}
    for split, items in splits.items():
        if not items:
            raise InputError(f"attribute detector: the {split} split has no images")
    images = {s: load_images(items) for s, items in splits.items()}
    labels = {s: torch.from_numpy(word_labels(items, words)) for s, items in splits.items()}

    model = AttributeDetector(backbone, grid_size, len(words), cfg.hidden_dim)
    with torch.no_grad():  # start each word at its training frequency f: 1 - (1 - p)^cells = f (ours: a zero bias
        cells = grid_size * grid_size  # makes every P^w ~ 1 over the cells and the first epochs undo that)
        frequency = labels["train"].mean(0).clamp(1e-4, 1 - 1e-4)
        model.words.bias.copy_(torch.logit(-torch.expm1(torch.log1p(-frequency) / cells)))
    head = [p for n, p in model.named_parameters() if not n.startswith("backbone.")]
    optimizer = torch.optim.Adam([{"params": model.backbone.parameters(), "lr": cfg.trunk_lr},
                                  {"params": head, "lr": cfg.lr}])
    n, history, best = len(images["train"]), [], BestWeights(cfg.patience, cfg.min_delta)
    for epoch in tqdm(range(1, cfg.epochs + 1), desc="attributes", disable=not progress, leave=False):
        model.train()
        order, total = torch.randperm(n, generator=gen), 0.0
        for lo in range(0, n, cfg.batch_size):
            rows = order[lo:lo + cfg.batch_size]
            loss = mil_loss(model.cell_logits(images["train"][rows]), labels["train"][rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(rows)
        val = detection_metrics(predict(model, images["val"]), labels["val"].numpy(), cfg.top_k)
        history.append({"epoch": epoch, "train_loss": total / n, "val_mAP": val["mAP"],
                        f"val_precision_at_{cfg.top_k}": val[f"precision_at_{cfg.top_k}"]})
        log(history[-1], epoch)
        if best.done(val["mAP"], epoch, model):
            break
    best_epoch = best.restore(model)
    probs = {s: predict(model, images[s]) for s in splits}
    test = detection_metrics(probs["test"], labels["test"].numpy(), cfg.top_k)
    _write_sets(cfg, splits, probs, words, caption_words, sizes, out_paths)
    return {"test": test, "best_epoch": best_epoch, "history": history, "words": words,
            "train_images": n, "seconds": time.perf_counter() - start}


def _write_sets(cfg: AttributesConfig, splits: dict[str, list[KarpathyImage]], probs: dict[str, np.ndarray],
                words: list[str], caption_words: list[str], sizes: dict[int, tuple[int, int]],
                out_paths: dict[str, Path]) -> None:
    ids = {w: k for k, w in enumerate(caption_words)}
    items = [im for s in splits for im in splits[s]]
    scores = np.concatenate([probs[s] for s in splits])
    boxes = [np.array([[0, 0, *sizes[im.image_id]]], np.float32) for im in items]

    def rows(chosen: list[str], p: list[float]) -> np.ndarray:
        return np.array([[ids[w], q] for w, q in zip(chosen, p)], dtype=np.float32).reshape(-1, 2)

    detected = []
    for s in scores:
        top = np.argsort(-s, kind="stable")[:cfg.top_k]
        detected.append(rows([words[k] for k in top], s[top].tolist()))
    oracle = [rows(chosen, [1.0] * len(chosen)) for chosen in (oracle_words(im, words, cfg.top_k) for im in items)]
    for name, sets in (("attributes", detected), ("attributes_oracle", oracle)):
        if any(len(r) == 0 for r in sets):
            raise InputError(f"attribute detector: an image has no {name} word (its captions use none of the "
                             f"{len(words)} detector words)")
        write_region_file(out_paths[name], [im.image_id for im in items],
                          [b.repeat(len(r), 0) for b, r in zip(boxes, sets)], sets,
                          [sizes[im.image_id] for im in items],
                          f"attribute detector ({name}): rows (caption-vocabulary word id, probability)")
