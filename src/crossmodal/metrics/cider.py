"""Fast exact CIDEr-D (pycocoevalcap 1.2's formula) for SCST rewards and constant-caption search.

pycocoevalcap's CiderScorer walks Python dicts n-gram by n-gram; SCST needs a reward for every sampled
caption of every batch, and the best-constant-caption search scores thousands of captions against a whole
split. Here every n-gram of a call gets an exact integer id (orders built one on another with `np.unique`,
no hashing, so no collisions) and the whole computation is sorted-array joins and `np.bincount`.

The formula reproduced, per candidate c with references r_1..r_m (inputs are already tokenized):
  weight(g) = log(N) - log(max(1, df(g))), N = number of reference lists the document frequencies come from
  v_s(g)    = tf_s(g) * weight(g)                      (for n-grams of orders 1..n)
  sim_k     = sum_g min(v_c(g), v_r(g)) * v_r(g) / (|v_c,k| |v_r,k|)      (0 when a norm is 0)
  score     = 10 / m * sum_r mean_k sim_k * exp(-(l_c - l_r)^2 / (2 sigma^2))
where l_s is pycocoevalcap's "length": the number of bigrams of s (words - 1, at least 0), and n = 4.

Document frequencies come either from a corpus given once to the constructor (the official SCST code caches
them for the training references) or, with `corpus=None`, from the references of each call, which is what
pycocoevalcap's Cider does; the latter equals pycocoevalcap's CiderScorer to rounding (tests/metrics/test_cider.py).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass
class _Analysis:
    """Exact n-gram ids of a list of sentences: one row per distinct (sentence, n-gram) pair."""

    n_sentences: int
    lengths: np.ndarray  # (S,) pycocoevalcap length: number of bigrams
    entry_sentence: np.ndarray  # (E,) sorted by sentence then gram
    entry_gram: np.ndarray  # (E,) global gram id
    entry_tf: np.ndarray  # (E,) term frequency
    gram_order: np.ndarray  # (G,) 0-based order of each gram
    n_grams: int
    order_offsets: list[int]  # global id of the first gram of each order
    order_prefix: list[np.ndarray]  # per order: local id of the (k-1)-gram prefix (unused for order 1)
    order_last: list[np.ndarray]  # per order: local word id of the last word
    words: list[str]  # local word id -> word


def _analyse(sentences: Sequence[str], n: int) -> _Analysis:
    """Split, map words to call-local ids, and give every n-gram of orders 1..n an exact id."""
    split = [s.split() for s in sentences]
    n_words = np.fromiter((len(w) for w in split), dtype=np.int64, count=len(split))
    flat = list(itertools.chain.from_iterable(split))
    local = {w: i for i, w in enumerate(dict.fromkeys(flat))}  # C-level passes; ids in first-seen order
    word_ids = np.fromiter(map(local.__getitem__, flat), dtype=np.int64, count=len(flat))
    n_vocab = max(len(local), 1)
    sentence_of = np.repeat(np.arange(len(split), dtype=np.int64), n_words)
    end_of = np.repeat(np.cumsum(n_words), n_words)
    position = np.arange(word_ids.size, dtype=np.int64)

    occ_sentence, occ_gram = [], []
    offsets, prefixes, lasts = [], [], []
    offset = 0
    ids = word_ids  # order-1 ids are the local word ids (every local word occurs)
    for k in range(1, n + 1):
        if k == 1:
            valid = np.ones(word_ids.size, dtype=bool)
            n_distinct = len(local)
            prefix = np.full(n_distinct, -1, dtype=np.int64)
            last = np.arange(n_distinct, dtype=np.int64)
            order_ids = ids
        else:
            valid = position + (k - 1) < end_of
            idx = np.nonzero(valid)[0]
            keys = ids[idx] * n_vocab + word_ids[idx + (k - 1)]
            uniq, inverse = np.unique(keys, return_inverse=True)
            n_distinct = uniq.size
            prefix, last = uniq // n_vocab, uniq % n_vocab
            order_ids = np.full(word_ids.size, -1, dtype=np.int64)
            order_ids[idx] = inverse
        offsets.append(offset)
        prefixes.append(prefix)
        lasts.append(last)
        occ_sentence.append(sentence_of[valid])
        occ_gram.append(order_ids[valid] + offset)
        offset += n_distinct
        ids = order_ids
    n_grams = offset
    gram_order = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets + [n_grams]))

    keys = np.concatenate(occ_sentence) * max(n_grams, 1) + np.concatenate(occ_gram)
    uniq, counts = np.unique(keys, return_counts=True)
    lengths = np.maximum(n_words - 1, 0)  # pycocoevalcap counts bigrams as the length
    return _Analysis(
        n_sentences=len(split), lengths=lengths,
        entry_sentence=uniq // max(n_grams, 1), entry_gram=uniq % max(n_grams, 1), entry_tf=counts,
        gram_order=gram_order, n_grams=n_grams, order_offsets=offsets,
        order_prefix=prefixes, order_last=lasts, words=list(local),
    )


def _unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values (sorting beats numpy's hash-based np.unique on these int64 keys)."""
    x = np.sort(x)
    return x[np.concatenate(([True], x[1:] != x[:-1]))] if x.size else x


def _group_df(a: _Analysis, sentence_group: np.ndarray, first_ref: int,
              multiplicity: np.ndarray | None = None) -> np.ndarray:
    """Number of reference lists (documents) containing each gram; a deduplicated list counts `multiplicity` times."""
    refs = a.entry_sentence >= first_ref
    group = sentence_group[a.entry_sentence[refs] - first_ref]
    pairs = _unique(group * max(a.n_grams, 1) + a.entry_gram[refs])
    counts = None if multiplicity is None else multiplicity[pairs // max(a.n_grams, 1)]
    return np.bincount(pairs % max(a.n_grams, 1), weights=counts, minlength=a.n_grams).astype(np.float64)


def _check_lists(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> None:
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} reference lists")
    if any(len(r) == 0 for r in references):
        raise ValueError("every candidate needs at least one reference")


class CiderD:
    """CIDEr-D scorer with document frequencies from a fixed corpus or from each call's references.

    `corpus`: one list of reference captions per image (tokenized, space-separated). Given, its document
    frequencies and log(len(corpus)) are computed once and used by every call (SCST rewards). None: each
    call uses its own `references` as the corpus, exactly as pycocoevalcap's Cider.
    """

    n = 4  # n-gram orders; fixed, as pycocoevalcap only works with 4 (its cooking ignores its own n)

    def __init__(self, corpus: Sequence[Sequence[str]] | None = None, sigma: float = 6.0):
        self.sigma = float(sigma)
        self.cached = corpus is not None
        if corpus is None:
            return
        if len(corpus) == 0:
            raise ValueError("the document-frequency corpus is empty")
        sentences = [s for refs in corpus for s in refs]
        group = np.repeat(np.arange(len(corpus), dtype=np.int64), [len(r) for r in corpus])
        a = _analyse(sentences, self.n)
        df = _group_df(a, group, 0)
        self._ref_len = math.log(float(len(corpus)))
        self._vocab = {w: i for i, w in enumerate(a.words)}
        self._n_vocab = max(len(a.words), 1)
        # Per order: sorted keys (prefix index in the previous order's table * vocab + last word) and df.
        self._tables: list[np.ndarray] = []
        self._table_df: list[np.ndarray] = []
        for k in range(self.n):
            lo, hi = a.order_offsets[k], a.order_offsets[k] + a.order_last[k].size
            if k == 0:
                keys = a.order_last[0]
            else:
                keys = a.order_prefix[k] * self._n_vocab + a.order_last[k]
            self._tables.append(keys)  # already sorted: np.unique output (order 1: arange)
            self._table_df.append(df[lo:hi])

    # ------------------------------------------------------------------ document frequencies
    def _cached_df(self, a: _Analysis) -> np.ndarray:
        """Look every gram of a call up in the constructor's tables (0 for n-grams the corpus lacks)."""
        word_index = np.fromiter((self._vocab.get(w, -1) for w in a.words), dtype=np.int64, count=len(a.words))
        df = np.zeros(a.n_grams, dtype=np.float64)
        previous = None
        for k in range(self.n):
            last = word_index[a.order_last[k]]
            if k == 0:
                known, keys = last >= 0, last
            else:
                prefix = previous[a.order_prefix[k]]
                known = (prefix >= 0) & (last >= 0)
                keys = prefix * self._n_vocab + last
            table = self._tables[k]
            index = np.full(keys.size, -1, dtype=np.int64)
            if k == 0:  # the unigram table is arange(vocabulary): the word index is the table index
                index[known] = keys[known]
                df[:keys.size][known] = self._table_df[0][keys[known]]
            elif table.size:
                query = np.flatnonzero(known)  # n-grams with an unseen prefix or word cannot be in the corpus
                pos = np.minimum(np.searchsorted(table, keys[query]), table.size - 1)
                hit = table[pos] == keys[query]
                query, pos = query[hit], pos[hit]
                index[query] = pos
                df[a.order_offsets[k] + query] = self._table_df[k][pos]
            previous = index
        return df

    def _weights(self, a: _Analysis, group: np.ndarray, first_ref: int, n_documents: int,
                 multiplicity: np.ndarray | None = None) -> np.ndarray:
        if self.cached:
            df, ref_len = self._cached_df(a), self._ref_len
        else:
            df, ref_len = _group_df(a, group, first_ref, multiplicity), math.log(float(n_documents))
        return ref_len - np.log(np.maximum(df, 1.0))

    def _norms(self, a: _Analysis, weight: np.ndarray) -> np.ndarray:
        vec = a.entry_tf * weight[a.entry_gram]
        order = a.gram_order[a.entry_gram]
        sq = np.bincount(a.entry_sentence * self.n + order, weights=vec * vec, minlength=a.n_sentences * self.n)
        return np.sqrt(sq).reshape(a.n_sentences, self.n)

    def _penalty(self, delta: np.ndarray) -> np.ndarray:
        return np.exp(-(delta.astype(np.float64) ** 2) / (2.0 * self.sigma ** 2))

    # ------------------------------------------------------------------ scoring
    def score(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """CIDEr-D of candidates[i] against references[i], for every i (float64 array).

        Identical reference lists (SCST passes one per sampled caption of an image) are analysed once; in
        per-call mode each still counts as one document, as it does in pycocoevalcap.
        """
        _check_lists(candidates, references)
        b = len(candidates)
        if b == 0:
            return np.zeros(0)
        unique: dict[tuple[str, ...], int] = {}
        cand_group = np.fromiter((unique.setdefault(tuple(r), len(unique)) for r in references),
                                 dtype=np.int64, count=b)
        ref_lists = list(unique)
        n_refs = np.array([len(r) for r in ref_lists], dtype=np.int64)
        first_ref = np.cumsum(n_refs) - n_refs
        ref_group = np.repeat(np.arange(len(ref_lists), dtype=np.int64), n_refs)
        a = _analyse(list(candidates) + [s for refs in ref_lists for s in refs], self.n)
        multiplicity = np.bincount(cand_group, minlength=len(ref_lists)).astype(np.float64)
        weight = self._weights(a, ref_group, b, b, multiplicity)
        norms = self._norms(a, weight)
        g = max(a.n_grams, 1)

        # join candidate n-grams with the same n-grams in the references of the candidate's list
        is_cand = a.entry_sentence < b
        c_sent, c_gram, c_tf = a.entry_sentence[is_cand], a.entry_gram[is_cand], a.entry_tf[is_cand]
        r_sent, r_gram, r_tf = a.entry_sentence[~is_cand] - b, a.entry_gram[~is_cand], a.entry_tf[~is_cand]
        r_key = ref_group[r_sent] * g + r_gram
        r_order = np.argsort(r_key, kind="stable")
        r_key = r_key[r_order]
        starts = np.flatnonzero(np.concatenate(([True], r_key[1:] != r_key[:-1]))) if r_key.size else r_key
        run_key, run_len = r_key[starts], np.diff(np.append(starts, r_key.size))
        c_key = cand_group[c_sent] * g + c_gram
        pos = np.minimum(np.searchsorted(run_key, c_key), max(run_key.size - 1, 0))
        hit = (run_key[pos] == c_key) if run_key.size else np.zeros(c_key.size, dtype=bool)
        lo = np.where(hit, starts[pos] if run_key.size else 0, 0)
        count = np.where(hit, run_len[pos] if run_key.size else 0, 0)
        c_idx = np.repeat(np.arange(c_key.size), count)
        r_idx = r_order[np.repeat(lo, count) + np.arange(c_idx.size) - np.repeat(np.cumsum(count) - count, count)]
        w = weight[c_gram[c_idx]]
        contribution = w * w * r_tf[r_idx] * np.minimum(c_tf[c_idx], r_tf[r_idx])

        # (candidate, reference) pairs: pair p = pair_start[i] + position of the reference in its list
        m = n_refs[cand_group]
        pair_start = np.cumsum(m) - m
        n_pairs = int(m.sum())
        pair_cand = np.repeat(np.arange(b, dtype=np.int64), m)
        pair_ref = first_ref[cand_group][pair_cand] + np.arange(n_pairs) - pair_start[pair_cand]
        cand_of = c_sent[c_idx]
        pair = pair_start[cand_of] + r_sent[r_idx] - first_ref[cand_group[cand_of]]
        order = a.gram_order[c_gram[c_idx]]
        numer = np.bincount(pair * self.n + order, weights=contribution,
                            minlength=n_pairs * self.n).reshape(n_pairs, self.n).astype(np.float64)
        denom = norms[pair_cand] * norms[b + pair_ref]
        sim = np.divide(numer, denom, out=np.zeros_like(numer), where=denom > 0)
        pen = self._penalty(a.lengths[pair_cand] - a.lengths[b + pair_ref])
        return np.bincount(pair_cand, weights=sim.mean(axis=1) * pen, minlength=b) / m * 10.0

    def constant_caption_scores(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """Corpus CIDEr-D of each candidate emitted for every image (mean over `references`' images).

        Linear in the number of n-gram entries: min(tf_c, tf_r) is written as sum_t [tf_c >= t][tf_r >= t], and
        candidates of equal length share the length penalty, so the reference side collapses to one vector
        per (candidate length) over (n-gram, t) features and each candidate is a sparse dot product with it.
        """
        if any(len(r) == 0 for r in references):
            raise ValueError("every image needs at least one reference")
        c, n_images = len(candidates), len(references)
        if c == 0 or n_images == 0:
            return np.zeros(c)
        n_refs = np.array([len(r) for r in references], dtype=np.int64)
        group = np.repeat(np.arange(n_images, dtype=np.int64), n_refs)
        a = _analyse(list(candidates) + [s for refs in references for s in refs], self.n)
        weight = self._weights(a, group, c, n_images)
        norms = self._norms(a, weight)
        is_cand = a.entry_sentence < c
        tf_cap = int(a.entry_tf.max(initial=0)) + 1

        # reference side: expand each entry to its (gram, t) features, t = 1..tf_r
        r_sent, r_gram, r_tf = a.entry_sentence[~is_cand] - c, a.entry_gram[~is_cand], a.entry_tf[~is_cand]
        r_rep = np.repeat(np.arange(r_tf.size), r_tf)
        r_t = np.arange(r_rep.size) - np.repeat(np.cumsum(r_tf) - r_tf, r_tf) + 1
        features, r_feature = np.unique(r_gram[r_rep] * tf_cap + r_t, return_inverse=True)
        w = weight[r_gram]
        r_value = (w * w * r_tf)[r_rep]
        r_order = a.gram_order[r_gram][r_rep]
        r_norm = norms[c:, :]
        inv_norm = np.divide(1.0, r_norm, out=np.zeros_like(r_norm), where=r_norm > 0)
        scale = 10.0 / (self.n * n_images * n_refs[group])  # (R,)
        r_len = a.lengths[c:]

        cand_len = a.lengths[:c]
        lengths, length_index = np.unique(cand_len, return_inverse=True)
        z = np.empty((features.size, lengths.size))
        entry_ref = r_sent[r_rep]
        for j, length in enumerate(lengths):  # one pass per distinct candidate length (a handful)
            coef = (self._penalty(length - r_len) * scale)[:, None] * inv_norm  # (R, n)
            z[:, j] = np.bincount(r_feature, weights=r_value * coef[entry_ref, r_order], minlength=features.size)

        # candidate side: features (gram, t) for t = 1..tf_c, dotted with z of the candidate's length
        c_sent, c_gram, c_tf = a.entry_sentence[is_cand], a.entry_gram[is_cand], a.entry_tf[is_cand]
        c_rep = np.repeat(np.arange(c_tf.size), c_tf)
        c_t = np.arange(c_rep.size) - np.repeat(np.cumsum(c_tf) - c_tf, c_tf) + 1
        keys = c_gram[c_rep] * tf_cap + c_t
        pos = np.minimum(np.searchsorted(features, keys), max(features.size - 1, 0))
        found = (features[pos] == keys) if features.size else np.zeros(keys.size, dtype=bool)
        entry_sent = c_sent[c_rep]
        c_norm = norms[entry_sent, a.gram_order[c_gram][c_rep]]
        inv_c = np.divide(1.0, c_norm, out=np.zeros_like(c_norm), where=c_norm > 0)
        value = np.where(found, z[pos, length_index[entry_sent]] if features.size else 0.0, 0.0) * inv_c
        return np.bincount(entry_sent, weights=value, minlength=c)
