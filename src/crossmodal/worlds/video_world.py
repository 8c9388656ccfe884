"""The synthetic video world: clips of moving objects with sound, and captions that need several modalities.

It stands in for MSVD and MSR-VTT (Low-Rank HOCA, Jin et al. 2019). Each clip shows one *subject* object doing one
action, and makes the sound of the subject's material each time the action strikes something:

- **Appearance** (frames): the subject's colour and shape, and the place (the background of the clip's category).
- **Motion** (the frames over time): the action (rolling, sliding, bouncing, spinning, falling) and its direction.
- **Sound** (the audio track): the material (metal, wood, glass, rubber). Objects of every material look alike, so
  the material is heard, never seen. Half of the clips also hold a silent *twin*, of the subject's colour and
  shape, doing another action: which of the two actions the caption names is told by the sound's timing alone
  (a bounce's impacts, a roll's taps).

Distractors: an object of another colour and shape drifting slowly (silent), frame noise, and in the audio a mains
hum and white noise. Captions come from a grammar of several phrasings with synonyms, each naming the subject's
shape, its action, and, in most phrasings, its colour, material, direction or place; no caption names the twin or
the distractor.

Physics (time s in seconds, the clip lasting `duration` = frames / fps; y grows downwards, the floor at 0.85 of the
frame height; r the object's radius):
- rolling: x = x0 + v s on the floor, the angle turns by dx / r (rolling without slipping); a tap each quarter
  turn. Rolling, sliding and drifting cross about half (a fifth when drifting) of the frame in the clip.
- sliding: the same path without turning; scraping (white-noise excitation) while it moves.
- bouncing: x = x0 + small drift, height h(s) = A |sin(pi s / P)| over the floor; an impact at every landing.
- spinning: in place, the angle turns at w rad/s; a tick every quarter turn.
- falling: rests high until s0, then falls with constant acceleration to the floor (landing at s1); one impact.
The sound is the excitation (impulses at the strike times, or noise while sliding) convolved with the material's
impulse response, a sum of exponentially decaying partials (`MATERIALS`: frequencies in Hz and decay time).

Files are the datasets' own formats (see `data/video.py` for the annotation readers and `data/video_files.py` for
the clips): MSVD-like clips are AVI files (MPEG-4 Part 2 video, MP3 audio) named `<youtube id>_<start>_<end>.avi`
with `AllVideoDescriptions.txt` and `youtube_mapping.txt`; MSR-VTT-like clips are MP4 files (H.264, AAC) named
`video<N>.mp4` with `videodatainfo.json` (its 20 categories reduced to the world's places). Split proportions follow
the real datasets (MSVD 1200 / 100 / 670 of 1970, MSR-VTT 6513 / 497 / 2990 of 10000). Generation is seeded per
clip (seed, dataset, index): a clip's content does not depend on the other clips or on the dataset sizes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from scipy.signal import fftconvolve
from tqdm import tqdm

from ..config.data import VIDEO_DATASETS, VideoWorldConfig  # its sizes (params `video.world`)
from ..data.video import split_sizes
from ..data.video_files import write_clip
from ..io import atomic_path, write_json, write_text
from .phrasing import article
from .seeding import item_rng

DATASETS = VIDEO_DATASETS
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (215, 45, 45), "green": (45, 165, 65), "blue": (55, 95, 225), "yellow": (230, 210, 45),
    "purple": (150, 75, 195), "orange": (240, 140, 35),
}
SHAPES = ("circle", "square", "triangle", "star")
ACTIONS = ("rolling", "sliding", "bouncing", "spinning", "falling")
# Material -> (partial frequencies in Hz, their amplitudes, decay time constant in s): the impulse response of a
# strike. Metal rings long and high, wood knocks short and low, glass clinks high and short, rubber thuds.
MATERIALS: dict[str, tuple[tuple[float, ...], tuple[float, ...], float]] = {
    "metal": ((1870.0, 2950.0, 4130.0), (1.0, 0.6, 0.35), 0.30),
    "wood": ((420.0, 1130.0), (1.0, 0.4), 0.035),
    "glass": ((3100.0, 5230.0), (1.0, 0.5), 0.09),
    "rubber": ((160.0, 330.0), (1.0, 0.3), 0.025),
}
# Places (the MSR-VTT-like categories): background colour and the word the captions use.
PLACES: dict[str, tuple[int, int, int]] = {
    "kitchen": (200, 190, 170), "garden": (150, 185, 140), "street": (150, 150, 160), "studio": (60, 60, 75),
}

# Caption vocabulary: one entry per concept, its synonyms (annotators differ).
SHAPE_WORDS = {"circle": ("ball", "sphere"), "square": ("cube", "block", "box"), "triangle": ("pyramid", "wedge"),
               "star": ("star",)}
MATERIAL_WORDS = {"metal": ("metal", "metallic", "steel"), "wood": ("wooden",), "glass": ("glass",),
                  "rubber": ("rubber",)}
ACTION_WORDS = {  # (third person, -ing form) pairs
    "rolling": (("rolls", "rolling"),), "sliding": (("slides", "sliding"), ("glides", "gliding")),
    "bouncing": (("bounces", "bouncing"), ("hops", "hopping")), "spinning": (("spins", "spinning"),
                                                                           ("rotates", "rotating")),
    "falling": (("falls", "falling"), ("drops", "dropping")),
}
DIRECTION_WORDS = {"left": ("to the left", "leftwards"), "right": ("to the right", "rightwards"),
                   "down": ("down", "to the floor"), "up and down": ("up and down",), "around": ("around", "in place")}
PLACE_WORDS = {place: (f"in a {place}", f"in the {place}") for place in PLACES}


@dataclass(frozen=True)
class Mover:
    """One object and its motion: `action` for the subject and its twin, "drifting" for the distractor."""

    color: str
    shape: str
    action: str
    direction: str
    x0: float  # start centre x, fraction of the frame width
    speed: float  # fraction of the frame width per second (rolling, sliding, drifting)
    period: float  # bouncing: seconds per bounce; spinning: seconds per turn
    start: float  # falling: seconds at rest before the fall


@dataclass(frozen=True)
class Clip:
    video_id: str
    split: str
    place: str
    material: str
    subject: Mover
    twin: Mover | None
    distractor: Mover
    captions: tuple[str, ...]


def _mover(rng: np.random.Generator, color: str, shape: str, action: str, duration: float) -> Mover:
    if action in ("rolling", "sliding", "drifting"):
        direction = str(rng.choice(["left", "right"]))
        speed = rng.uniform(0.15, 0.25) if action == "drifting" else rng.uniform(0.45, 0.55)  # per clip
        x0 = rng.uniform(0.15, 0.3) if direction == "right" else rng.uniform(0.7, 0.85)
    else:
        direction = {"bouncing": "up and down", "spinning": "around", "falling": "down"}[action]
        speed, x0 = 0.0, rng.uniform(0.2, 0.8)
    return Mover(color, shape, action, direction, float(x0), float(speed) / duration, float(rng.uniform(0.6, 1.0)),
                 float(rng.uniform(0.5, 1.5)))


def sample_clip(cfg: VideoWorldConfig, dataset: str, index: int, split: str) -> Clip:
    """The clip `index` of `dataset`: its scene and its captions (seeded by (seed, dataset, index))."""
    rng = item_rng(cfg.seed, dataset, index)
    color, other_color = (str(c) for c in rng.choice(list(COLORS), 2, replace=False))
    shape, other_shape = (str(s) for s in rng.choice(SHAPES, 2, replace=False))
    action = str(rng.choice(ACTIONS))
    material = str(rng.choice(list(MATERIALS)))
    place = str(rng.choice(list(PLACES)))
    subject = _mover(rng, color, shape, action, cfg.duration)
    twin = None
    if rng.random() < cfg.twin_probability:
        twin = _mover(rng, color, shape, str(rng.choice([a for a in ACTIONS if a != action])), cfg.duration)
    distractor = _mover(rng, other_color, other_shape, "drifting", cfg.duration)
    count = cfg.captions_per_clip[dataset]
    if dataset == "msvd":
        count = int(rng.integers(count // 2, count + 1))
    video_id = f"vid{index + 1}" if dataset == "msvd" else f"video{index}"
    captions = tuple(caption(rng, subject, material, place) for _ in range(count))
    return Clip(video_id, split, place, material, subject, twin, distractor, captions)


def caption(rng: np.random.Generator, subject: Mover, material: str, place: str) -> str:
    """One annotator's sentence about the subject, from one of several phrasings with synonyms."""
    def pick(options):
        return options[int(rng.integers(len(options)))]

    noun = pick(SHAPE_WORDS[subject.shape])
    verb, verb_ing = ACTION_WORDS[subject.action][int(rng.integers(len(ACTION_WORDS[subject.action])))]
    color, mat = subject.color, pick(MATERIAL_WORDS[material])
    direction = pick(DIRECTION_WORDS[subject.direction])
    where = pick(PLACE_WORDS[place])
    phrasings = (
        f"{article(mat)} {mat} {color} {noun} {verb} {direction}",
        f"{article(color)} {color} {noun} made of {material} is {verb_ing}",
        f"the {color} {mat} {noun} is {verb_ing} {direction}",
        f"{article(color)} {color} {noun} {verb} {where}",
        f"{article(mat)} {mat} {noun} is {verb_ing} {where}",
        f"someone shows {article(color)} {color} {noun} {verb_ing} {direction}",
        f"{article(noun)} {noun} {verb} {direction}",
        f"there is {article(mat)} {mat} {noun} {verb_ing}",
    )
    return pick(phrasings)


def make_clips(cfg: VideoWorldConfig, dataset: str) -> list[Clip]:
    """Every clip of `dataset`, in id order, with the split its position gives (train first, as in both datasets)."""
    sizes = split_sizes(dataset, cfg.clips[dataset])
    train, val = sizes["train"], sizes["val"]

    def split_of(i: int) -> str:
        return "train" if i < train else "val" if i < train + val else "test"
    return [sample_clip(cfg, dataset, i, split_of(i)) for i in range(cfg.clips[dataset])]


# --- motion ---------------------------------------------------------------------------------------------------

def radius(cfg: VideoWorldConfig) -> float:
    return 0.12 * cfg.frame_size


def trajectory(mover: Mover, cfg: VideoWorldConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """Per frame: centre x and y in pixels and the angle (radians); and the strike times in seconds (sorted)."""
    size, r = cfg.frame_size, radius(cfg)
    floor = 0.85 * size - r  # centre height of an object resting on the floor
    fine = np.arange(cfg.frames * 16) / (cfg.fps * 16)  # 16 sub-steps per frame to find strike times
    sign = -1.0 if mover.direction == "left" else 1.0
    x = np.full_like(fine, mover.x0 * size)
    y = np.full_like(fine, floor)
    angle = np.zeros_like(fine)
    strikes: list[float] = []
    if mover.action in ("rolling", "sliding", "drifting"):
        x = x + sign * mover.speed * size * fine
        if mover.action == "rolling":
            angle = sign * (x - x[0]) / r
            quarter = math.pi / 2
            strikes = list(np.arange(1, int(abs(angle[-1]) // quarter) + 1) * quarter * r / (mover.speed * size))
        elif mover.action == "drifting":
            y = np.full_like(fine, 0.35 * size)
    elif mover.action == "bouncing":
        height = 0.45 * size
        y = floor - height * np.abs(np.sin(math.pi * fine / mover.period))
        x = x + 0.02 * size * np.sin(fine)
        strikes = list(np.arange(1, int(fine[-1] / mover.period) + 1) * mover.period)
    elif mover.action == "spinning":
        y = np.full_like(fine, 0.5 * size)
        angle = 2 * math.pi * fine / mover.period
        strikes = list(np.arange(1, int(4 * fine[-1] / mover.period) + 1) * mover.period / 4)
    elif mover.action == "falling":
        top = 0.15 * size + r
        fall = math.sqrt(2 * (floor - top) / (size * 4.0))  # acceleration: 4 frame heights per s^2
        t = np.clip(fine - mover.start, 0.0, None)
        y = np.minimum(top + 0.5 * size * 4.0 * t ** 2, floor)
        if mover.start + fall <= fine[-1]:
            strikes = [mover.start + fall]
    else:
        raise ValueError(f"unknown action {mover.action!r}")
    frames = slice(None, None, 16)
    return x[frames], y[frames], angle[frames], [float(s) for s in strikes if s <= cfg.duration]


def _outline(shape: str, cx: float, cy: float, r: float, angle: float) -> list[tuple[float, float]]:
    if shape == "square":
        corners = [math.pi / 4 + k * math.pi / 2 for k in range(4)]
        return [(cx + r * math.cos(a + angle), cy + r * math.sin(a + angle)) for a in corners]
    if shape == "triangle":
        return [(cx + r * math.cos(a + angle), cy + r * math.sin(a + angle))
                for a in (-math.pi / 2, math.pi / 6, 5 * math.pi / 6)]
    if shape == "star":
        return [(cx + (r if k % 2 == 0 else 0.45 * r) * math.cos(-math.pi / 2 + k * math.pi / 5 + angle),
                 cy + (r if k % 2 == 0 else 0.45 * r) * math.sin(-math.pi / 2 + k * math.pi / 5 + angle))
                for k in range(10)]
    raise ValueError(f"no outline for {shape!r}")


def _draw(draw: ImageDraw.ImageDraw, mover: Mover, cx: float, cy: float, angle: float, r: float) -> None:
    color = COLORS[mover.color]
    dark = tuple(int(c * 0.45) for c in color)
    if mover.shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=color)
    else:
        draw.polygon(_outline(mover.shape, cx, cy, r, angle), fill=color)
    # a mark from the centre to the rim makes turning visible (a ball rolling, a cube spinning)
    draw.line([(cx, cy), (cx + 0.9 * r * math.cos(angle - math.pi / 2), cy + 0.9 * r * math.sin(angle - math.pi / 2))],
              fill=dark, width=max(1, int(r / 4)))


def render_frames(clip: Clip, cfg: VideoWorldConfig) -> np.ndarray:
    """The clip's frames, [frames, size, size, 3] uint8 RGB: place background, floor, objects, pixel noise."""
    size, r = cfg.frame_size, radius(cfg)
    rng = item_rng(cfg.seed, "frames", clip.video_id)
    movers = [m for m in (clip.distractor, clip.twin, clip.subject) if m is not None]
    paths = [trajectory(m, cfg)[:3] for m in movers]
    out = np.empty((cfg.frames, size, size, 3), np.uint8)
    for t in range(cfg.frames):
        image = Image.new("RGB", (size, size), PLACES[clip.place])
        draw = ImageDraw.Draw(image)
        draw.rectangle([0, int(0.85 * size), size, size], fill=tuple(int(c * 0.7) for c in PLACES[clip.place]))
        for mover, (xs, ys, angles) in zip(movers, paths):
            _draw(draw, mover, float(xs[t]), float(ys[t]), float(angles[t]), r)
        noisy = np.asarray(image, np.int16) + rng.integers(-6, 7, (size, size, 1), dtype=np.int16)
        out[t] = np.clip(noisy, 0, 255).astype(np.uint8)
    return out


# --- sound ----------------------------------------------------------------------------------------------------

def impulse_response(material: str, sample_rate: int) -> np.ndarray:
    """h(t) = sum_k a_k exp(-t / tau) sin(2 pi f_k t) for 5 tau, peak-normalised."""
    freqs, amps, tau = MATERIALS[material]
    t = np.arange(int(5 * tau * sample_rate)) / sample_rate
    h = sum(a * np.sin(2 * math.pi * f * t) for f, a in zip(freqs, amps)) * np.exp(-t / tau)
    return (h / np.abs(h).max()).astype(np.float64)


def render_audio(clip: Clip, cfg: VideoWorldConfig) -> np.ndarray:
    """The clip's audio, mono float32 in [-1, 1]: the subject's strikes through its material, hum and noise."""
    n = int(round(cfg.duration * cfg.sample_rate))
    rng = item_rng(cfg.seed, "audio", clip.video_id)
    excitation = np.zeros(n)
    subject = clip.subject
    response = impulse_response(clip.material, cfg.sample_rate)
    if subject.action == "sliding":  # scraping: noise while it moves (all clip long), at RMS 0.1 for every material
        excitation += rng.standard_normal(n) * 0.2 / np.sqrt(np.sum(response ** 2))
    else:
        strength = {"bouncing": 1.0, "falling": 1.0, "rolling": 0.5, "spinning": 0.4}[subject.action]
        for s in trajectory(subject, cfg)[3]:
            excitation[min(n - 1, int(s * cfg.sample_rate))] += strength
    sound = fftconvolve(excitation, response)[:n] * 0.5
    t = np.arange(n) / cfg.sample_rate
    sound += 0.01 * np.sin(2 * math.pi * 50.0 * t) + cfg.noise * rng.standard_normal(n)
    return np.clip(sound, -1.0, 1.0).astype(np.float32)


# --- the datasets' files --------------------------------------------------------------------------------------

def _youtube_id(cfg: VideoWorldConfig, dataset: str, index: int) -> tuple[str, int]:
    """An 11-character YouTube-style id and a start second for the clip (seeded like the clip)."""
    rng = item_rng(cfg.seed, "youtube", dataset, index)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    return "".join(alphabet[k] for k in rng.integers(64, size=11)), int(rng.integers(512))


def labels(clip: Clip) -> dict:
    """What the clip shows and sounds like (the extractors' training labels, and the world's ground truth)."""
    def mover(m: Mover | None) -> dict | None:
        return None if m is None else {"color": m.color, "shape": m.shape, "action": m.action,
                                       "direction": m.direction}
    return {"split": clip.split, "place": clip.place, "material": clip.material, "subject": mover(clip.subject),
            "twin": mover(clip.twin), "distractor": mover(clip.distractor)}


def write_dataset(cfg: VideoWorldConfig, dataset: str, root: str | Path, progress: bool = True) -> list[Clip]:
    """Write one dataset under `root` (a fresh directory, renamed into place when complete):
    - msvd: `YouTubeClips/<youtube id>_<start>_<end>.avi`, `AllVideoDescriptions.txt`, `youtube_mapping.txt`;
    - msrvtt: `videos/video<N>.mp4`, `videodatainfo.json` (splits train / val / test, category = place index);
    and, for both, `clips.json`: every clip's labels (`labels`) by video id."""
    clips = make_clips(cfg, dataset)
    seconds = int(math.ceil(cfg.duration))
    with atomic_path(root) as tmp:
        folder = tmp / ("YouTubeClips" if dataset == "msvd" else "videos")
        folder.mkdir(parents=True)
        names = []
        for index, clip in enumerate(tqdm(clips, desc=f"{dataset} clips", disable=not progress)):
            youtube_id, start = _youtube_id(cfg, dataset, index)
            names.append((f"{youtube_id}_{start}_{start + seconds}", youtube_id, start))
            file = folder / (f"{names[-1][0]}.avi" if dataset == "msvd" else f"{clip.video_id}.mp4")
            write_clip(file, render_frames(clip, cfg), cfg.fps, render_audio(clip, cfg), cfg.sample_rate)
        if dataset == "msvd":
            header = ["# Synthetic video world (crossmodal-repro): MSVD-like descriptions, one per line:",
                      "# <youtube id>_<start>_<end> <description>"]
            lines = [f"{name} {text}" for (name, _, _), clip in zip(names, clips) for text in clip.captions]
            write_text(tmp / "AllVideoDescriptions.txt", "\n".join(header + lines) + "\n")
            write_text(tmp / "youtube_mapping.txt",
                       "".join(f"{name} {clip.video_id}\n" for (name, _, _), clip in zip(names, clips)))
        else:
            places = list(PLACES)
            videos = [{"category": places.index(clip.place), "url": f"https://www.youtube.com/watch?v={yt}",
                       "video_id": clip.video_id, "start time": float(start), "end time": float(start + seconds),
                       "split": clip.split, "id": index}
                      for index, ((_, yt, start), clip) in enumerate(zip(names, clips))]
            sentences = [{"caption": text, "video_id": clip.video_id}
                         for clip in clips for text in clip.captions]
            for sen_id, sentence in enumerate(sentences):
                sentence["sen_id"] = sen_id
            write_json(tmp / "videodatainfo.json",
                       {"info": {"contributor": "crossmodal-repro synthetic video world", "version": "1.0"},
                        "videos": videos, "sentences": sentences})
        write_json(tmp / "clips.json", {clip.video_id: labels(clip) for clip in clips})
    return clips
