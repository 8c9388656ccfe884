"""Self-critical sequence training (Rennie et al., CVPR 2017): REINFORCE with a baseline from the model itself.

Per image, `train.scst.samples` candidate captions are drawn and, when the baseline needs it, one greedy caption is
decoded (eval mode, no gradients). The candidates (`train.scst.candidates`) are:
- `sample`: multinomial samples (train mode, with gradients): Rennie et al. and the official AoANet and X-LAN codes;
- `beam`: the `train.scst.samples` best hypotheses of a beam search (eval mode, no gradients), whose token
  log-probabilities are then computed teacher-forced in train mode, with gradients (`beam_candidates`): the
  meshed-memory Transformer's SCST (Cornia et al., CVPR 2020), which searches in train mode instead. A deviation
  from the captioning papers here, on the synthetic world only (params.yaml `recipes.scst`; their `paper:` blocks
  sample): the world's multinomial samples score far below the greedy caption (Up-Down: 120 against 196 CIDEr-D
  on the training batches), and the policy gradient of their expected reward shortened the captions (11.2 to
  9.1 words) and lowered the greedy and beam-3 validation scores; around the beams it raised beam 3 from 212.5
  to 261.2 in three epochs (benchmarks/results/scst_beam.md).
The advantage of a candidate is its CIDEr-D minus a baseline (`train.scst.baseline`):
- `greedy`: the greedy caption's CIDEr-D (Rennie et al., the official AoANet and X-LAN codes);
- `mean`: the mean CIDEr-D of the image's other samples (Luo, "A better variant of self-critical sequence
  training", 2020), which centres each image's advantages: here samples score far below the greedy caption,
  so against the greedy baseline almost every advantage is negative (benchmarks/results/scst.md).
  No greedy caption is decoded then: nothing reads it, and decoding it made a step from beams 1.06-1.43x as
  long (Up-Down, X-LAN, ETA; benchmarks/results/scst_steps*.md). Each epoch's row logs the candidates' mean reward
  as `train_CIDEr_sample` or `train_CIDEr_beam`, and the greedy captions' as `train_CIDEr_greedy` where decoded.
Rewards are computed against the image's training references, with document frequencies computed once
from all training references (`metrics.cider.CiderD(corpus=...)`), as the official AoANet and X-LAN codes
cache them. The loss is -reward x log p(token), averaged over the sampled tokens including each <eos>
(the official codes' RewardCriterion). Captions and references are compared as the model sees them: word
ids through the vocabulary, so rare words are `<unk>` on both sides, as in the official codes.

Training starts from the best cross-entropy model of the `init` system (`data/models/<init>/model.pt`, chosen by
validation CIDEr-D) and otherwise runs in the shared trainer (training/trainer.py) as the captioning task's
second objective (tasks/captioning.py): per-epoch validation, best epoch, checkpoint/resume, beam search on test.
Sampling draws from a generator seeded by (seed, epoch), so a resumed run draws the same samples (in a
multi-process run, rank r > 0 from its own stream: see training/distributed.py, which also says how the loss is
normalised there).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...data.captions import decode
from ...data.inputs import Inputs
from ...decoding.search import beam_search, greedy_decode, sample_decode
from ...metrics.cider import CiderD
from ...models.base import Captioner
from .xe import with_eos

# each epoch's mean reward, by whose captions: the candidates' (`train.scst.candidates`) and the greedy baseline's
REWARD_KEYS = {"sample": "train_CIDEr_sample", "beam": "train_CIDEr_beam", "greedy": "train_CIDEr_greedy"}


def reference_corpus(labels, words: list[str]) -> list[list[str]]:
    """Every training image's references as space-joined words (the reward's references and df corpus)."""
    return [[decode(labels.labels[j], words) for j in range(labels.start[i], labels.end[i])]
            for i in range(len(labels.image_ids))]


def token_mask(seqs: torch.Tensor) -> torch.Tensor:
    """[N, L] True for each sampled word and the <eos> after it (none when the caption ran to L words)."""
    lengths = (seqs != 0).sum(1)
    return torch.arange(seqs.size(1), device=seqs.device).unsqueeze(0) <= lengths.unsqueeze(1)


def beam_candidates(model: Captioner, inputs: Inputs, max_length: int, beams: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `beams` best hypotheses of each image's beam search as SCST's candidates -> (seqs LongTensor[B*beams, L],
    token_logprobs FloatTensor[B*beams, L]) laid out as `sample_decode`'s: rows image-major, best beam first.

    The search runs in eval mode without gradients; the log-probabilities of its words and `<eos>` are then
    computed teacher-forced in the mode the caller left the model in (train: dropout on), with gradients, 0 after
    each caption's end. In eval mode their sums are the beam search's scores."""
    training = model.training
    model.eval()
    with torch.no_grad():
        seqs, _ = beam_search(model, inputs, beams, max_length, all_beams=True)
    model.train(training)
    seqs = seqs.reshape(-1, max_length)
    tokens, mask = with_eos(seqs)  # the <eos> after a caption cut at max_length falls in the dropped column
    token_logprobs = model(inputs, seqs, seq_per_img=beams).gather(2, tokens.unsqueeze(2)).squeeze(2)
    return seqs, token_logprobs.masked_fill(~mask, 0.0)[:, :max_length]


def self_critical_loss(token_logprobs: torch.Tensor, seqs: torch.Tensor, rewards: torch.Tensor,
                       share: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """-(reward x log-probability) summed over sampled tokens, divided by the number of tokens (or by
    `share(number of tokens)`, training/distributed.py's Context.share)."""
    mask = token_mask(seqs).to(token_logprobs.dtype)
    return -(token_logprobs * rewards.unsqueeze(1) * mask).sum() / (mask.sum() if share is None else share(mask.sum()))


def advantages(sample_scores: np.ndarray, greedy_scores: np.ndarray | None, n: int, baseline: str) -> np.ndarray:
    """[B*n] each sample's reward minus its baseline; an image's n samples are contiguous (module docstring). B may
    be 0 (a process's empty share of a batch)."""
    if baseline == "greedy":
        return sample_scores - np.repeat(greedy_scores, n)
    per_image = sample_scores.reshape(-1, n)
    others = (per_image.sum(1, keepdims=True) - per_image) / (n - 1)
    return (per_image - others).reshape(-1)


def self_critical_batch(model: Captioner, inputs: Inputs, references: list[list[str]],
                        cider: CiderD, words: list[str], samples_per_image: int, max_length: int,
                        generator: torch.Generator | None = None, net: Callable | None = None,
                        share: Callable[[torch.Tensor], torch.Tensor] | None = None, baseline: str = "greedy",
                        candidates: str = "sample") -> tuple[torch.Tensor, np.ndarray, np.ndarray | None]:
    """Loss of one batch, and the CIDEr-D of its candidates [B*n] and of its greedy captions [B] (one scorer call;
    None under the `mean` baseline, which decodes no greedy caption).

    `references[i]` are image i's references; the model is left in train mode; `candidates` is `sample` or `beam`
    (module docstring). The candidates are drawn as
    `net(fn)` = fn(model) when given (the trainer's DDP wrapper, training/distributed.py's Forward); `share` as in
    `self_critical_loss`.
    """
    greedy = None
    if baseline == "greedy":
        model.eval()
        with torch.no_grad():
            greedy, _ = greedy_decode(model, inputs, max_length)
    model.train()

    def draw(m: Captioner) -> tuple[torch.Tensor, torch.Tensor]:
        if candidates == "beam":
            return beam_candidates(m, inputs, max_length, samples_per_image)
        return sample_decode(m, inputs, max_length, samples_per_image, generator=generator)

    samples, token_logprobs = draw(model) if net is None else net(draw)
    captions = [decode(s, words) for s in samples.tolist()]
    refs = [r for r in references for _ in range(samples_per_image)]
    if greedy is not None:
        captions += [decode(g, words) for g in greedy.tolist()]
        refs += list(references)
    scores = cider.score(captions, refs)
    sample_scores, greedy_scores = scores[: len(samples)], scores[len(samples):] if greedy is not None else None
    advantage = advantages(sample_scores, greedy_scores, samples_per_image, baseline)
    advantage = torch.from_numpy(advantage).to(token_logprobs.device, token_logprobs.dtype)
    return self_critical_loss(token_logprobs, samples, advantage, share), sample_scores, greedy_scores


class Objective:
    """Self-critical updates; logs the loss and the mean CIDEr-D of the candidates (`train_CIDEr_sample` or
    `train_CIDEr_beam`) and, under the greedy baseline, of the greedy captions (`train_CIDEr_greedy`)."""

    def __init__(self, task):
        self.task, self.train = task, task.system.train
        self.references = reference_corpus(task.train_labels, task.words)
        self.cider = CiderD(corpus=self.references)  # document frequencies of the training references, once

    def start_epoch(self, epoch: int) -> None:
        """Sampling draws from (seed, epoch): a resumed run draws the same samples."""
        seed = self.task.dist.stream_seed(self.train.seed * 100003 + epoch + 7919)
        self.generator = torch.Generator(self.task.device).manual_seed(seed)

    def loss(self, net, model, rows, inputs, share):
        loss, sample_scores, greedy_scores = self_critical_batch(
            model, inputs, [self.references[i] for i in rows], self.cider, self.task.words,
            self.train.scst.samples, self.task.max_length, self.generator, net, share, self.train.scst.baseline,
            self.train.scst.candidates)
        logged = {"train_loss": (loss.item(), 1.0),  # (sum, count) per rank
                  REWARD_KEYS[self.train.scst.candidates]: (float(np.sum(sample_scores)), float(len(sample_scores)))}
        if greedy_scores is not None:
            logged[REWARD_KEYS["greedy"]] = (float(np.sum(greedy_scores)), float(len(greedy_scores)))
        return loss, logged
