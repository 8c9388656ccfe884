"""Feature extractors of the video world: the analogues of Low-Rank HOCA's pretrained extractors (Jin et al. 2019,
§5.1: Inception-ResNet-v2 on 80 sampled frames, I3D on 64-frame chunks centred on them, VGGish on the audio track).
Each is a small network trained on the world's labels (`clips.json`) and then run over every clip, giving one
`[T, D]` array per clip and modality, T the sampled frames, in the HDF5 layout `data/video.py` reads.

Inputs, per clip decoded from its file (`data/video_files.read_clip`), for T sampled frames at indices
i_t = floor((t + 1/2) F / T), t = 0..T-1, of the clip's F frames:
- `frames`: the RGB frame i_t, [3, H, W] in [0, 1];
- `motion`: the `chunk_frames` frames centred on i_t (i_t - L/2 .. i_t + L/2 - 1, the clip's first or last frame
  repeated past its ends), 2x2-average-pooled, [3, L, H/2, W/2];
- `audio`: the log-mel spectrogram (below) over the `audio_window` seconds centred on the frame's time i_t / fps,
  [1, mels, frames of the window], zero-padded (log floor) past the clip's ends.

Log-mel spectrogram (as VGGish computes its input): 25 ms Hann windows every 10 ms, |STFT|, a mel filterbank of
`mels` triangles spaced evenly on the HTK mel scale m = 2595 log10(1 + f / 700) from 0 Hz to half the sample rate,
then log(x + 0.01). The filterbank is a few lines of that formula (`mel_filterbank`, tested against its definition)
rather than librosa, which would bring numba and scikit-learn for this one function.

Networks (the input batch-normalised, three stride-2 convolutions with batch norm and ReLU, global average pooling,
then a D-wide ReLU layer, the feature; a linear head is used in training only): 2-d over frames, 3-d over chunks,
2-d over spectrogram windows. Training targets are multi-label (binary cross-entropy), every sampled position of a
clip carrying its clip's labels:
- frames: the colours and the shapes in view (subject, twin, distractor), and the place;
- motion: the actions in view (the distractor's "drifting" included) and their directions;
- audio: the material and the subject's action (its strikes' rhythm).
Adam, seeded, for `epochs` epochs, or by the trainer's early-stopping rule on the val clips with `patience` > 0
(`train_extractor`); the stage reports each label group's accuracy on the val clips (`group_accuracy`).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

from ..config.features import VIDEO_MODALITIES as MODALITIES, VideoFeatureConfig  # params `video.features`
from ..data.video_files import DecodedClip
from ..stopping import BestWeights
from ..worlds.video_world import ACTIONS, COLORS, DIRECTION_WORDS, MATERIALS, PLACES, SHAPES

LABEL_GROUPS: dict[str, dict[str, tuple[str, ...]]] = {
    "frames": {"color": tuple(COLORS), "shape": SHAPES, "place": tuple(PLACES)},
    "motion": {"action": ACTIONS + ("drifting",), "direction": tuple(DIRECTION_WORDS)},
    "audio": {"material": tuple(MATERIALS), "action": ACTIONS},
}


def sample_indices(num_frames: int, count: int) -> np.ndarray:
    """i_t = floor((t + 1/2) F / T): T frames spread evenly over the clip's F."""
    return np.floor((np.arange(count) + 0.5) * num_frames / count).astype(int)


def mel_filterbank(mels: int, n_fft: int, sample_rate: int) -> np.ndarray:
    """[mels, n_fft // 2 + 1]: triangle k rises from mel point k to k + 1 and falls to k + 2, the mels + 2 points
    spaced evenly on m = 2595 log10(1 + f / 700) between 0 Hz and sample_rate / 2 (HTK)."""
    top = 2595.0 * np.log10(1.0 + sample_rate / 2 / 700.0)
    points = 700.0 * (10 ** (np.linspace(0.0, top, mels + 2) / 2595.0) - 1.0)
    freqs = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    lower, centre, upper = points[:-2, None], points[1:-1, None], points[2:, None]
    rising = (freqs - lower) / (centre - lower)
    falling = (upper - freqs) / (upper - centre)
    return np.clip(np.minimum(rising, falling), 0.0, None)


def log_mel(audio: np.ndarray, sample_rate: int, mels: int) -> np.ndarray:
    """[mels, frames]: log(mel(|STFT|) + 0.01), 25 ms Hann windows every 10 ms."""
    win, hop = int(0.025 * sample_rate), int(0.010 * sample_rate)
    n_fft = 1 << (win - 1).bit_length()
    signal = torch.as_tensor(np.pad(audio.astype(np.float32), (0, max(0, win - len(audio)))))
    spec = torch.stft(signal, n_fft, hop_length=hop, win_length=win, window=torch.hann_window(win), center=False,
                      return_complex=True).abs().numpy()
    return np.log(mel_filterbank(mels, n_fft, sample_rate) @ spec + 0.01).astype(np.float32)


def clip_inputs(clip: DecodedClip, cfg: VideoFeatureConfig, modalities: Sequence[str] = MODALITIES
                ) -> dict[str, torch.Tensor]:
    """The networks' inputs at the clip's T sampled frames (see the module docstring), of `modalities`."""
    frames = torch.from_numpy(clip.frames).permute(0, 3, 1, 2).float() / 255.0  # [F, 3, H, W]
    count = len(frames)
    index = sample_indices(count, cfg.frames_per_clip)
    out = {}
    if "frames" in modalities:
        out["frames"] = frames[torch.from_numpy(index)]
    if "motion" in modalities:
        half = cfg.chunk_frames // 2
        chunk = np.clip(index[:, None] + np.arange(-half, half)[None, :], 0, count - 1)  # [T, L]
        out["motion"] = F.avg_pool2d(frames, 2)[torch.from_numpy(chunk)].permute(0, 2, 1, 3, 4)  # [T, 3, L, H/2, W/2]
    if "audio" not in modalities:
        return out
    spectrogram = log_mel(clip.audio, clip.sample_rate, cfg.mels)
    per_second = 100.0  # spectrogram frames (10 ms hop)
    width = int(round(cfg.audio_window * per_second))
    floor = math.log(0.01)
    padded = np.pad(spectrogram, ((0, 0), (width, width)), constant_values=floor)
    starts = np.round(index / clip.fps * per_second).astype(int) - width // 2 + width
    audio = np.stack([padded[:, s:s + width] for s in starts])[:, None]  # [T, 1, mels, width]
    return {**out, "audio": torch.from_numpy(audio)}


def label_vector(labels: Mapping, modality: str) -> np.ndarray:
    """The clip's multi-label target for one modality (`labels`: the clip's entry of clips.json)."""
    movers = [labels[k] for k in ("subject", "twin", "distractor") if labels.get(k)]
    present = {
        "color": {m["color"] for m in movers}, "shape": {m["shape"] for m in movers}, "place": {labels["place"]},
        "direction": {m["direction"] for m in movers}, "material": {labels["material"]},
    }
    present["action"] = ({m["action"] for m in movers} if modality == "motion" else {labels["subject"]["action"]})
    return np.array([float(name in present[group]) for group, names in LABEL_GROUPS[modality].items()
                     for name in names], np.float32)


class Extractor(nn.Module):
    """Batch norm of the input, three stride-2 convolutions (2-d, or 3-d for motion) each with batch norm and
    ReLU, global average pooling, a D-wide ReLU layer."""

    def __init__(self, modality: str, cfg: VideoFeatureConfig):
        super().__init__()
        conv, norm = (nn.Conv3d, nn.BatchNorm3d) if modality == "motion" else (nn.Conv2d, nn.BatchNorm2d)
        width = cfg.channels
        channels = {"frames": 3, "motion": 3, "audio": 1}[modality]
        layers: list[nn.Module] = [norm(channels)]  # inputs standardised by their running statistics
        for out in (width, 2 * width, 4 * width):
            layers += [conv(channels, out, 3, stride=2, padding=1, bias=False), norm(out), nn.ReLU()]
            channels = out
        self.convs = nn.Sequential(*layers)
        self.feature = nn.Sequential(nn.Linear(channels, cfg.dims[modality]), nn.ReLU())
        self.head = nn.Linear(cfg.dims[modality], sum(len(n) for n in LABEL_GROUPS[modality].values()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, ...] -> features [N, D]."""
        return self.feature(self.convs(x).flatten(2).mean(2))


def train_extractor(modality: str, inputs: Sequence[torch.Tensor], targets: Sequence[np.ndarray],
                    cfg: VideoFeatureConfig, progress: bool = False,
                    val: tuple[Sequence[torch.Tensor], Sequence[np.ndarray]] | None = None) -> tuple[Extractor, dict]:
    """Train on every sampled position of the clips (`inputs[c]` [T, ...], `targets[c]` its clip's labels);
    returns the network and its curve, the mean training loss of each epoch (`train_loss`).

    With `cfg.patience` > 0 each epoch is validated on `val` (the val clips' inputs and targets) by the mean of the
    label groups' accuracies (`group_accuracy`), the run ends by the trainer's early-stopping rule
    (stopping.py) after at most `cfg.epochs` epochs, and the best epoch's weights are kept; the curve
    adds `val_mean_accuracy` and `best_epoch`. With patience 0 every epoch runs and the last is kept."""
    if cfg.patience and val is None:
        raise ValueError("early stopping (patience > 0) needs the val clips")
    generator = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    net = Extractor(modality, cfg)
    x = torch.cat(list(inputs))
    y = torch.cat([torch.from_numpy(t).expand(len(i), -1) for i, t in zip(inputs, targets)])
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    losses, accuracy, best = [], [], BestWeights(cfg.patience, cfg.min_delta)
    for epoch in tqdm(range(1, cfg.epochs + 1), desc=f"{modality} extractor", disable=not progress):
        net.train()
        order, total = torch.randperm(len(x), generator=generator), 0.0
        for start in range(0, len(x), cfg.batch_size):
            batch = order[start:start + cfg.batch_size]
            loss = F.binary_cross_entropy_with_logits(net.head(net(x[batch])), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        losses.append(total / len(x))
        if cfg.patience:
            accuracy.append(float(np.mean(list(group_accuracy(net.eval(), modality, *val).values()))))
            if best.done(accuracy[-1], epoch, net):
                break
    curve = {"train_loss": losses}
    if cfg.patience:
        curve |= {"val_mean_accuracy": accuracy, "best_epoch": best.restore(net)}
    return net.eval(), curve


@torch.no_grad()
def group_accuracy(net: Extractor, modality: str, inputs: Sequence[torch.Tensor],
                   targets: Sequence[np.ndarray]) -> dict[str, float]:
    """Per label group, the share of sampled positions whose whole group is right (each label decided at
    probability 0.5): chance is far below 1/2 for a group of several labels."""
    scores = torch.cat([net.head(net(x)) > 0 for x in inputs]).float()
    truth = torch.cat([torch.from_numpy(t).expand(len(x), -1) for x, t in zip(inputs, targets)])
    out, start = {}, 0
    for group, names in LABEL_GROUPS[modality].items():
        span = slice(start, start + len(names))
        out[group] = float((scores[:, span] == truth[:, span]).all(1).float().mean())
        start += len(names)
    return out


@torch.no_grad()
def extract(net: Extractor, inputs: torch.Tensor) -> np.ndarray:
    """[T, ...] -> the clip's features [T, D] (float32)."""
    return net(inputs).numpy().astype(np.float32)
