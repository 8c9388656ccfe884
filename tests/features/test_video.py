"""The video world's feature extractors (features/video.py): the log-mel front end against its definition, the
inputs sampled at the right frames and times, the labels, and three networks that learn the world's labels."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from crossmodal.data.video_files import DecodedClip
from crossmodal.features.video import (
    LABEL_GROUPS,
    VideoFeatureConfig,
    clip_inputs,
    extract,
    group_accuracy,
    label_vector,
    log_mel,
    mel_filterbank,
    sample_indices,
    train_extractor,
)
from crossmodal.worlds.video_world import (
    VideoWorldConfig,
    labels,
    make_clips,
    render_audio,
    render_frames,
    trajectory,
)

pytestmark = pytest.mark.usefixtures("one_thread")

WORLD = VideoWorldConfig(clips={"msvd": 10, "msrvtt": 30}, captions_per_clip={"msvd": 2, "msrvtt": 2}, frames=16,
                         fps=8, frame_size=32)
CFG = VideoFeatureConfig(frames_per_clip=4, chunk_frames=4, dims={"frames": 32, "motion": 32, "audio": 32},
                         channels=8, epochs=12, batch_size=16, lr=0.01)


def decoded(clip, world=WORLD) -> DecodedClip:
    return DecodedClip(render_frames(clip, world), float(world.fps), render_audio(clip, world), world.sample_rate)


def test_mel_filterbank_is_the_htk_triangles():
    mels, n_fft, rate = 6, 64, 8000
    bank = mel_filterbank(mels, n_fft, rate)
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    edges = [700 * (10 ** (k * mel(rate / 2) / (mels + 1) / 2595) - 1) for k in range(mels + 2)]
    for k in range(mels):
        for j in range(n_fft // 2 + 1):
            f = j * rate / n_fft
            lo, mid, hi = edges[k], edges[k + 1], edges[k + 2]
            want = (f - lo) / (mid - lo) if lo <= f <= mid else (hi - f) / (hi - mid) if mid < f <= hi else 0.0
            assert bank[k, j] == pytest.approx(want, abs=1e-9)


def test_log_mel_puts_a_tone_in_its_band_at_a_10_ms_hop():
    rate = 16000
    tone = np.sin(2 * np.pi * 2000 * np.arange(rate) / rate).astype(np.float32)
    spec = log_mel(tone, rate, 32)
    assert spec.shape == (32, (rate - 512) // 160 + 1)  # 25-ms windows inside 512-sample frames
    bank = mel_filterbank(32, 512, rate)
    assert spec.mean(1).argmax() == bank[:, 2000 * 512 // rate].argmax()


def test_inputs_sit_at_the_sampled_frames_and_their_times():
    assert sample_indices(16, 4).tolist() == [2, 6, 10, 14]
    clip = dataclasses.replace(make_clips(WORLD, "msrvtt")[0], material="wood")
    clip = dataclasses.replace(clip, subject=dataclasses.replace(clip.subject, action="falling", start=0.9))
    source = decoded(clip)
    inputs = clip_inputs(source, CFG)
    assert inputs["frames"].shape == (4, 3, 32, 32) and inputs["motion"].shape == (4, 3, 4, 16, 16)
    assert torch.equal(inputs["frames"][1], torch.from_numpy(source.frames[6]).permute(2, 0, 1).float() / 255)
    pooled = torch.nn.functional.avg_pool2d(inputs["frames"][1:2], 2)[0]
    assert torch.allclose(inputs["motion"][1][:, 2], pooled)  # frame i_t sits at position L/2 of its chunk
    assert inputs["audio"].shape == (4, 1, CFG.mels, 50)
    # the landing's knock (at 0.9 s + the fall) is loudest in the window centred nearest it (frames at 0.25 s steps)
    landing = trajectory(clip.subject, WORLD)[3][0]
    nearest = int(np.argmin(np.abs(sample_indices(16, 4) / WORLD.fps - landing)))
    assert int(inputs["audio"].amax(dim=(1, 2, 3)).argmax()) == nearest


def test_labels_follow_the_modality():
    entry = {"place": "garden", "material": "glass", "subject": {"color": "red", "shape": "star", "action":
             "bouncing", "direction": "up and down"}, "twin": None,
             "distractor": {"color": "blue", "shape": "circle", "action": "drifting", "direction": "left"}}
    named = {m: [f"{g}:{n}" for g, names in LABEL_GROUPS[m].items() for n in names] for m in LABEL_GROUPS}
    on = {m: {named[m][i] for i in np.flatnonzero(label_vector(entry, m))} for m in LABEL_GROUPS}
    assert on["frames"] == {"color:red", "color:blue", "shape:star", "shape:circle", "place:garden"}
    assert on["motion"] == {"action:bouncing", "action:drifting", "direction:up and down", "direction:left"}
    assert on["audio"] == {"material:glass", "action:bouncing"}


@pytest.mark.slow
def test_each_extractor_learns_its_labels():
    clips = make_clips(WORLD, "msrvtt") + make_clips(WORLD, "msvd")
    inputs = [clip_inputs(decoded(c), CFG) for c in clips]
    entries = [labels(c) for c in clips]
    # on its training clips, whole groups right far above chance (a quarter at best for place and material,
    # lower for the sets of actions in view)
    for modality, group, floor in (("frames", "place", 0.9), ("motion", "action", 0.5), ("audio", "material", 0.6)):
        x = [i[modality] for i in inputs]
        y = [label_vector(e, modality) for e in entries]
        net, curve = train_extractor(modality, x, y, CFG)
        losses = curve["train_loss"]
        assert len(losses) == CFG.epochs and set(curve) == {"train_loss"}  # patience 0: every epoch, the last kept
        assert losses[-1] < 0.6 * losses[0], (modality, losses)
        assert group_accuracy(net, modality, x, y)[group] > floor, modality
        features = extract(net, x[0])
        assert features.shape == (CFG.frames_per_clip, CFG.dims[modality]) and features.dtype == np.float32
        again, _ = train_extractor(modality, x, y, CFG)
        assert np.array_equal(extract(again, x[0]), features)  # seeded: the same bits


def test_an_extractor_stops_by_the_early_stopping_rule_and_keeps_its_best_epoch():
    clips = make_clips(WORLD, "msrvtt") + make_clips(WORLD, "msvd")
    inputs = [clip_inputs(decoded(c), CFG, ("audio",))["audio"] for c in clips]
    targets = [label_vector(labels(c), "audio") for c in clips]
    train, val = (inputs[:30], targets[:30]), (inputs[30:], targets[30:])
    cfg = dataclasses.replace(CFG, epochs=40, patience=2, min_delta=0.01)
    net, curve = train_extractor("audio", *train, cfg, val=val)
    accuracy, best = curve["val_mean_accuracy"], curve["best_epoch"]
    assert len(curve["train_loss"]) == len(accuracy) < cfg.epochs  # stopped by patience, not by the cap
    assert best == accuracy.index(max(accuracy)) + 1 < len(accuracy)
    reference, gain = -1.0, 0  # the rule, directly: the last epoch that beat the reference by more than min_delta
    for epoch, value in enumerate(accuracy, 1):
        if value > reference + cfg.min_delta:
            reference, gain = value, epoch
    assert len(accuracy) - gain == cfg.patience
    assert np.mean(list(group_accuracy(net, "audio", *val).values())) == accuracy[best - 1]  # the best weights
    with pytest.raises(ValueError, match="val clips"):
        train_extractor("audio", *train, cfg)
