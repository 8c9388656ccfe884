"""Video clips as real files: writing a clip (frames and a mono audio track) and decoding one back, with PyAV.

PyAV binds FFmpeg's libraries, so the files are what FFmpeg tools read (`ffprobe clip.mp4` lists both streams):
- `mp4`: H.264 (libx264, yuv420p) and AAC, as MSR-VTT's clips;
- `avi`: MPEG-4 Part 2 and MP3, as MSVD's YouTube clips.
Encoding runs one thread with fixed settings, so one PyAV version writes the same bytes for the same clip.

Decoding returns the frames as RGB uint8 `[T, H, W, 3]` and the audio as mono float32 at the stream's sample
rate (channels averaged). Both codecs are lossy: pixels and samples come back close to, not equal to, what was
written; MP3 in AVI also starts with the encoder's delay (about 1,100 samples), which AVI cannot mark.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from ..io import InputError, atomic_path

CODECS = {"mp4": ("libx264", "aac"), "avi": ("mpeg4", "libmp3lame")}


@dataclass(frozen=True)
class DecodedClip:
    frames: np.ndarray  # [T, H, W, 3] uint8 RGB
    fps: float
    audio: np.ndarray  # [samples] float32 mono
    sample_rate: int


def write_clip(path: str | Path, frames: np.ndarray, fps: int, audio: np.ndarray, sample_rate: int) -> None:
    """Write `frames` ([T, H, W, 3] uint8, H and W even) and mono `audio` (float32 in [-1, 1]) atomically; the
    container follows the suffix (.mp4 or .avi)."""
    path = Path(path)
    container = path.suffix.lstrip(".")
    if container not in CODECS:
        raise ValueError(f"{path}: the suffix must be one of {', '.join('.' + c for c in CODECS)}")
    odd = frames.ndim == 4 and (frames.shape[1] % 2 or frames.shape[2] % 2)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or odd:
        raise ValueError(f"frames must be [T, H, W, 3] uint8 with even H and W, got {frames.shape} {frames.dtype}")
    video_codec, audio_codec = CODECS[container]
    with atomic_path(path) as tmp, av.open(str(tmp), "w", format=container) as out:
        video = out.add_stream(video_codec, rate=fps)
        video.width, video.height, video.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        video.thread_count = 1
        if video_codec == "libx264":
            # cpu-independent: x264's own CPU-specific code paths gave different files for one clip written
            # repeatedly in one process (5 variants in 30 writes on this AVX-512 CPU); with it, one file in 40
            video.options = {"crf": "18", "preset": "medium", "threads": "1", "x264-params": "cpu-independent=1"}
        else:
            video.bit_rate = 800_000
        sound = out.add_stream(audio_codec, rate=sample_rate, layout="mono")
        sound.bit_rate = 64_000
        for frame in frames:
            out.mux(video.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")))
        out.mux(video.encode(None))
        block = 1024
        for start in range(0, len(audio), block):
            chunk = av.AudioFrame.from_ndarray(np.ascontiguousarray(audio[None, start:start + block], np.float32),
                                               format="flt", layout="mono")
            chunk.sample_rate = sample_rate
            chunk.pts = start
            out.mux(sound.encode(chunk))
        out.mux(sound.encode(None))


def read_clip(path: str | Path) -> DecodedClip:
    """Decode the first video and the first audio stream of `path` (any container FFmpeg reads)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"missing video file: {path}")
    try:
        with av.open(str(path)) as source:
            if not source.streams.video or not source.streams.audio:
                raise InputError(f"{path}: needs a video and an audio stream, has "
                                 f"{len(source.streams.video)} and {len(source.streams.audio)}")
            video_stream = source.streams.video[0]
            fps = float(video_stream.average_rate or video_stream.guessed_rate)
            frames = [f.to_ndarray(format="rgb24") for f in source.decode(video=0)]
            source.seek(0)
            chunks, sample_rate = [], source.streams.audio[0].sample_rate
            for frame in source.decode(audio=0):
                data = frame.to_ndarray().astype(np.float32)
                if not frame.format.is_planar:  # interleaved [1, samples * channels]
                    data = data.reshape(-1, len(frame.layout.channels)).T
                chunks.append(data.mean(0))
    except av.FFmpegError as err:
        raise InputError(f"{path}: cannot decode ({err})") from None
    if not frames:
        raise InputError(f"{path}: the video stream has no frames")
    return DecodedClip(np.stack(frames), fps, np.concatenate(chunks) if chunks else np.zeros(0, np.float32),
                       sample_rate)
