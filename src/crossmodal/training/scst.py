"""Self-critical sequence training (Rennie et al., CVPR 2017): REINFORCE with the greedy caption as baseline.

Per image, `samples_per_image` captions are drawn by multinomial sampling (train mode, with gradients) and
one greedy caption is decoded (eval mode, no gradients). The reward of a sample is its CIDEr-D minus the
greedy caption's, both against the image's training references, with document frequencies computed once
from all training references (`metrics.cider.CiderD(corpus=...)`), as the official AoANet and X-LAN codes
cache them. The loss is -reward x log p(token), averaged over the sampled tokens including each <eos>
(the official codes' RewardCriterion). Captions and references are compared as the model sees them: word
ids through the vocabulary, so rare words are `<unk>` on both sides, as in the official codes.

Training starts from the best cross-entropy model of the `init` variant (`data/models/<init>/model.pt`,
chosen by validation CIDEr-D) and otherwise reuses the cross-entropy trainer: per-epoch validation,
best epoch, checkpoint/resume, beam search on test. Sampling draws from a generator seeded by
(seed, epoch), so a resumed run draws the same samples.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from .. import paths
from ..data.captions import decode
from ..decoding.search import greedy_decode, sample_decode
from ..metrics.cider import CiderD
from ..models.base import Captioner
from ..models.registry import load_state, read_model_file
from .xe import Trainer


def reference_corpus(labels, words: list[str]) -> list[list[str]]:
    """Every training image's references as space-joined words (the reward's references and df corpus)."""
    return [[decode(labels.labels[j], words) for j in range(labels.start[i], labels.end[i])]
            for i in range(len(labels.image_ids))]


def token_mask(seqs: torch.Tensor) -> torch.Tensor:
    """[N, L] True for each sampled word and the <eos> after it (none when the caption ran to L words)."""
    lengths = (seqs != 0).sum(1)
    return torch.arange(seqs.size(1)).unsqueeze(0) <= lengths.unsqueeze(1)


def self_critical_loss(token_logprobs: torch.Tensor, seqs: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """-(reward x log-probability) summed over sampled tokens, divided by the number of tokens."""
    mask = token_mask(seqs).to(token_logprobs.dtype)
    return -(token_logprobs * rewards.unsqueeze(1) * mask).sum() / mask.sum()


def self_critical_batch(model: Captioner, feats: torch.Tensor, mask: torch.Tensor, references: list[list[str]],
                        cider: CiderD, words: list[str], samples_per_image: int, max_length: int,
                        generator: torch.Generator | None = None) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Loss of one batch, and the CIDEr-D of its samples [B*n] and greedy captions [B] (one scorer call).

    `references[i]` are image i's references; the model is left in train mode.
    """
    model.eval()
    with torch.no_grad():
        greedy, _ = greedy_decode(model, feats, mask, max_length)
    model.train()
    samples, token_logprobs = sample_decode(model, feats, mask, max_length, samples_per_image, generator=generator)
    candidates = [decode(s, words) for s in samples.tolist()] + [decode(g, words) for g in greedy.tolist()]
    repeated = [r for r in references for _ in range(samples_per_image)]
    scores = cider.score(candidates, repeated + list(references))
    sample_scores, greedy_scores = scores[: len(samples)], scores[len(samples):]
    advantage = torch.from_numpy(sample_scores - np.repeat(greedy_scores, samples_per_image))
    return self_critical_loss(token_logprobs, samples, advantage.to(token_logprobs.dtype)), sample_scores, greedy_scores


class ScstTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.references = reference_corpus(self.train.labels, self.words)
        self.cider = CiderD(corpus=self.references)  # document frequencies of the training references, once

    def initialise(self) -> None:
        init_path = self.root / paths.MODELS / self.model_name / "model.pt"
        data, saved = read_model_file(init_path, self.cfg.stage_of(self.model_name))
        self.start_digest = hashlib.sha256(data).hexdigest()
        load_state(self.model, saved.get("state_dict", {}), init_path, self.model_name)

    def train_epoch(self, epoch: int) -> dict[str, float]:
        """One epoch of self-critical updates; returns the mean loss and CIDEr-D of samples and greedy captions."""
        cfg = self.train_cfg
        generator = torch.Generator().manual_seed(cfg.seed * 100003 + epoch + 7919)
        logged = {"train_loss": [], "train_CIDEr_sample": [], "train_CIDEr_greedy": []}
        for rows in self.batches(epoch):
            loss, sample_scores, greedy_scores = self_critical_batch(
                self.model, self.train.feats[rows], self.train.mask[rows], [self.references[i] for i in rows],
                self.cider, self.words, cfg.samples_per_image, self.cfg.captions.max_length, generator)
            self.optimise(loss)
            for key, value in zip(logged, (loss.item(), sample_scores.mean(), greedy_scores.mean())):
                logged[key].append(float(value))
        return {key: float(np.mean(values)) for key, values in logged.items()}
