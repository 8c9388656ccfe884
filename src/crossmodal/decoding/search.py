"""Caption decoding shared by every captioning model: greedy, multinomial sampling and batched beam search.

Models only implement the small `StepModel` interface (encode once, then one word per `step`), so the
search code lives here once, vectorised over images and beams, instead of inside each model. A model reads its
named inputs (`data.inputs`: a mapping name -> Padded(values [B, N, ...], mask [B, N])) in `encode`; the decoders
only check them against the model's `INPUTS` and take the batch size from them.

Output conventions (all three decoders): `seqs` is LongTensor[rows, max_length] holding only words;
`<eos>` is never written, every position after the end is 0 (`<pad>`), so a caption is the tokens before
the first 0. A sequence without `<eos>` within `max_length` is cut there. Scores are sums of the model's
log-probabilities of the chosen tokens, including the `<eos>` token when it was emitted.

`<pad>` and `<bos>` are never emitted (their log-probabilities are set to -inf before choosing): an
emitted 0 would end the caption while the search went on. Scores keep the model's own log-probabilities
(no renormalisation); a trained model gives these two tokens almost no mass anyway.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

import torch
from torch import Tensor

from ..data.captions import BOS, EOS, PAD, UNK  # noqa: F401  (the vocabulary convention lives there)
from ..data.inputs import Inputs, batch_size, check_inputs

Encoded = Any  # nested tuple/list/dict of tensors (batch dim first), or None
State = Any


@runtime_checkable
class StepModel(Protocol):
    """The decoding interface of every captioning model.

    A model may also name the inputs it needs in `INPUTS` (tuple of names, as every `Captioner` does); the
    decoders then check that the batch has them. Without `INPUTS` only the inputs' shapes are checked.
    """

    def encode(self, inputs: Inputs) -> Encoded:
        """Named inputs, each Padded(values [B, N, ...], mask BoolTensor[B, N] True = real) -> per-image encoding."""
        ...

    def init_state(self, encoded: Encoded, batch_size: int) -> State:
        """Initial decoder state (nested tensors, batch dim first) for `batch_size` rows of `encoded`."""
        ...

    def step(self, words: Tensor, state: State, encoded: Encoded) -> tuple[Tensor, State]:
        """words LongTensor[B] (previous word, `<bos>` first) -> (log_softmax FloatTensor[B, V], new state)."""
        ...


def map_tensors(fn: Callable[[Tensor], Tensor], obj: Any) -> Any:
    """Apply `fn` to every batch-first tensor in a nested tuple/list/dict (namedtuples kept); others pass through."""
    if isinstance(obj, Tensor):
        return fn(obj) if obj.dim() > 0 else obj
    if isinstance(obj, dict):
        return type(obj)((k, map_tensors(fn, v)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(map_tensors(fn, v) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_tensors(fn, v) for v in obj)
    return obj


def repeat_rows(obj: Any, n: int | Tensor) -> Any:
    """Repeat every row `n` times, copies contiguous (row i -> rows i*n .. i*n+n-1); `n` a tensor of counts [B]:
    row i `n[i]` times."""
    if isinstance(n, Tensor):
        return map_tensors(lambda t: t.repeat_interleave(n.to(t.device), dim=0), obj)
    if n == 1:
        return obj
    return map_tensors(lambda t: t.repeat_interleave(n, dim=0), obj)


def select_rows(obj: Any, index: Tensor) -> Any:
    """Reorder every tensor's batch dim with one index_select per tensor (beam reordering)."""
    return map_tensors(lambda t: t.index_select(0, index.to(t.device)), obj)


def _allowed(logprobs: Tensor) -> Tensor:
    """Copy of logprobs [..., V] with `<pad>` and `<bos>` excluded (-inf)."""
    return logprobs.detach().index_fill(-1, torch.tensor([PAD, BOS], device=logprobs.device), float("-inf"))


def _check(model: StepModel, inputs: Inputs, max_length: int) -> tuple[int, torch.device]:
    """Validate the inputs (against `model.INPUTS` when the model names them) -> (batch size, device)."""
    check_inputs(inputs, getattr(model, "INPUTS", ()))
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    return batch_size(inputs), next(iter(inputs.values())).mask.device


def _append(seqs: Tensor, t: int, chosen: Tensor, finished: Tensor) -> tuple[Tensor, Tensor]:
    """Write step t's words into seqs (0 from a row's <eos> on) -> (finished, next input words)."""
    ended = finished | (chosen == EOS)
    seqs[:, t] = torch.where(ended, torch.zeros_like(chosen), chosen)
    return ended, torch.where(ended, torch.full_like(chosen, PAD), chosen)


def greedy_decode(model: StepModel, inputs: Inputs, max_length: int) -> tuple[Tensor, Tensor]:
    """Argmax decoding of B images -> (seqs LongTensor[B, max_length], summed logprobs FloatTensor[B]).

    Runs under the caller's grad mode (SCST's greedy baseline wraps it in no_grad itself).
    """
    batch, device = _check(model, inputs, max_length)
    encoded = model.encode(inputs)
    state = model.init_state(encoded, batch)
    words = torch.full((batch,), BOS, dtype=torch.long, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    seqs = torch.zeros(batch, max_length, dtype=torch.long, device=device)
    total = None
    for t in range(max_length):
        logprobs, state = model.step(words, state, encoded)
        best_lp, best = _allowed(logprobs).max(dim=-1)
        best_lp = logprobs.gather(1, best.unsqueeze(1)).squeeze(1)
        gained = torch.where(finished, torch.zeros_like(best_lp), best_lp)
        total = gained if total is None else total + gained
        finished, words = _append(seqs, t, best, finished)
        if bool(finished.all()):
            break
    return seqs, total


def sample_decode(
    model: StepModel,
    inputs: Inputs,
    max_length: int,
    n_samples: int,
    generator: torch.Generator | None = None,
    temperature: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Multinomial sampling (SCST) -> (seqs LongTensor[B*n, L], token_logprobs FloatTensor[B*n, L]).

    Each image's `n_samples` rows are contiguous. token_logprobs[r, t] is the model's (untempered)
    log-probability of the token drawn at step t: a word, or `<eos>` at the position where seqs has
    its first 0; it is 0 after the end, so `token_logprobs.sum(1)` is the sequence log-probability and
    carries gradients (the caller chooses the grad mode). `temperature` only sharpens/flattens the
    sampling distribution.
    """
    batch, device = _check(model, inputs, max_length)
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    rows = batch * n_samples
    encoded = repeat_rows(model.encode(inputs), n_samples)
    state = model.init_state(encoded, rows)
    words = torch.full((rows,), BOS, dtype=torch.long, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    seqs = torch.zeros(rows, max_length, dtype=torch.long, device=device)
    token_lps: list[Tensor] = []
    for t in range(max_length):
        logprobs, state = model.step(words, state, encoded)
        allowed = _allowed(logprobs)
        probs = torch.softmax(allowed / temperature, dim=-1) if temperature != 1.0 else allowed.exp()
        drawn = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        lp = logprobs.gather(1, drawn.unsqueeze(1)).squeeze(1)
        token_lps.append(torch.where(finished, torch.zeros_like(lp), lp))
        finished, words = _append(seqs, t, drawn, finished)
        if bool(finished.all()):
            break
    token_logprobs = torch.stack(token_lps, dim=1)
    if token_logprobs.size(1) < max_length:
        token_logprobs = torch.nn.functional.pad(token_logprobs, (0, max_length - token_logprobs.size(1)))
    return seqs, token_logprobs


@torch.no_grad()
def beam_search(
    model: StepModel,
    inputs: Inputs,
    beam_size: int,
    max_length: int,
    length_normalization: bool = False,
    all_beams: bool = False,
) -> tuple[Tensor, Tensor]:
    """Beam search batched over images and beams -> (best seqs LongTensor[B, max_length], scores FloatTensor[B]).

    Rows are image-major ([B*beam]); each step one topk over beam*V candidates per image, beam index by
    floor division (the official X-LAN code used `/`, which is float division on modern PyTorch), and one
    index_select per state tensor. A hypothesis that emitted `<eos>` is frozen: it keeps its score and
    extends only with `<pad>` at zero cost, so it competes with live beams by its final score; one that
    reaches max_length is finished there. With `length_normalization` the final choice among the beam
    uses score / length (length counts the words plus the `<eos>` token), the search itself stays on
    summed log-probabilities. With `all_beams` every final hypothesis comes back, best first:
    (seqs LongTensor[B, beam, max_length], scores FloatTensor[B, beam]).
    """
    batch, device = _check(model, inputs, max_length)
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    k = beam_size
    encoded = repeat_rows(model.encode(inputs), k)
    state = model.init_state(encoded, batch * k)

    scores = torch.zeros(batch, k, device=device)
    scores[:, 1:] = float("-inf")  # only the first beam is live at step 0, so beams do not duplicate
    finished = torch.zeros(batch, k, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch, k, dtype=torch.long, device=device)
    seqs = torch.zeros(batch, k, max_length, dtype=torch.long, device=device)
    words = torch.full((batch * k,), BOS, dtype=torch.long, device=device)
    row_base = (torch.arange(batch, device=device) * k).unsqueeze(1)  # [B, 1]
    frozen_lp = None
    for t in range(max_length):
        logprobs, state = model.step(words, state, encoded)
        vocab = logprobs.size(-1)
        if frozen_lp is None:
            frozen_lp = torch.full((vocab,), float("-inf"), dtype=logprobs.dtype, device=device)
            frozen_lp[PAD] = 0.0
        logprobs = torch.where(finished.unsqueeze(-1), frozen_lp, _allowed(logprobs).view(batch, k, vocab))
        candidates = (scores.unsqueeze(-1) + logprobs).view(batch, k * vocab)
        scores, flat = candidates.topk(k, dim=1)  # sorted: beam 0 is the best by summed score
        parent = torch.div(flat, vocab, rounding_mode="floor")
        word = flat % vocab
        rows = (row_base + parent).view(-1)

        seqs = seqs.view(batch * k, max_length).index_select(0, rows).view(batch, k, max_length)
        finished = finished.view(-1).index_select(0, rows).view(batch, k)
        lengths = lengths.view(-1).index_select(0, rows).view(batch, k)
        state = select_rows(state, rows)

        lengths = lengths + (~finished).long()
        ended = finished | (word == EOS)
        seqs[:, :, t] = torch.where(ended, torch.zeros_like(word), word)
        finished = ended
        words = torch.where(finished, torch.full_like(word, PAD), word).view(-1)
        if bool((finished | torch.isneginf(scores)).all()):
            break

    final = scores / lengths.clamp(min=1).to(scores.dtype) if length_normalization else scores
    if all_beams:
        order = final.argsort(dim=1, descending=True, stable=True)
        return seqs.gather(1, order.unsqueeze(-1).expand_as(seqs)), final.gather(1, order)
    best = final.argmax(dim=1)
    pick = torch.arange(batch, device=device)
    return seqs[pick, best], final[pick, best]
