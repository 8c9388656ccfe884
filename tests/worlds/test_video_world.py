"""The synthetic video world (worlds/video_world.py) and its clip files (data/video_files.py): seeded clips whose
captions need appearance, motion and sound, audio whose strikes follow the subject's motion in its material's
timbre, and files in the real datasets' formats that the existing readers and FFmpeg decode."""
from __future__ import annotations

import dataclasses

import av
import numpy as np
import pytest

from crossmodal.data.video import check_standard_splits, read_msrvtt, read_msvd, split_sizes
from crossmodal.data.video_files import read_clip, write_clip
from crossmodal.io import InputError
from crossmodal.worlds.video_world import (
    ACTION_WORDS,
    MATERIAL_WORDS,
    MATERIALS,
    Mover,
    SHAPE_WORDS,
    VideoWorldConfig,
    make_clips,
    render_audio,
    render_frames,
    sample_clip,
    trajectory,
    write_dataset,
)

SMALL = VideoWorldConfig(clips={"msvd": 12, "msrvtt": 14}, captions_per_clip={"msvd": 10, "msrvtt": 6}, frames=16,
                         fps=8, frame_size=32, sample_rate=16000)


def envelope(audio: np.ndarray, rate: int, window: float = 0.01) -> np.ndarray:
    """RMS over windows of `window` seconds."""
    n = int(rate * window)
    return np.sqrt((audio[: len(audio) // n * n].reshape(-1, n).astype(np.float64) ** 2).mean(1))


def clip_with(**changes):
    """Clip 0 of msvd with some fields replaced (subject fields via `subject_<field>`)."""
    clip = sample_clip(VideoWorldConfig(), "msvd", 0, "train")
    subject = {k.removeprefix("subject_"): v for k, v in changes.items() if k.startswith("subject_")}
    rest = {k: v for k, v in changes.items() if not k.startswith("subject_")}
    return dataclasses.replace(clip, subject=dataclasses.replace(clip.subject, **subject), **rest)


def test_clips_are_seeded_per_clip_and_split_in_the_real_proportions():
    small, large = make_clips(VideoWorldConfig(), "msvd"), make_clips(
        VideoWorldConfig(clips={"msvd": 400, "msrvtt": 400}), "msvd")
    assert small[5].subject == large[5].subject and small[5].captions == large[5].captions
    assert make_clips(VideoWorldConfig(seed=1), "msvd")[5].captions != small[5].captions
    assert [c.split for c in small].count("train") == split_sizes("msvd", 200)["train"] == 122
    assert split_sizes("msvd", 1970) == {"train": 1200, "val": 100, "test": 670}
    assert split_sizes("msrvtt", 10000) == {"train": 6513, "val": 497, "test": 2990}
    assert len({len(c.captions) for c in small}) > 5  # MSVD-like: a varying number of captions per clip
    assert {len(c.captions) for c in make_clips(VideoWorldConfig(), "msrvtt")} == {20}


def test_every_caption_names_the_subject_never_the_twin_and_each_modality_has_its_own_words():
    clips = make_clips(VideoWorldConfig(), "msvd") + make_clips(VideoWorldConfig(), "msrvtt")
    material_seen = 0
    for clip in clips:
        for text in clip.captions:
            words = text.split()
            assert any(w in words for w in SHAPE_WORDS[clip.subject.shape])
            assert any(verb in words for pair in ACTION_WORDS[clip.subject.action] for verb in pair)
            if clip.twin is not None:  # the twin's action is never named
                assert not any(verb in words for pair in ACTION_WORDS[clip.twin.action] for verb in pair)
            named = [m for m, options in MATERIAL_WORDS.items() if any(o in words for o in options)]
            assert named in ([], [clip.material])
            material_seen += bool(named)
    assert 0.3 < material_seen / sum(len(c.captions) for c in clips) < 0.9
    twins = [c for c in clips if c.twin is not None]
    assert 0.35 < len(twins) / len(clips) < 0.65
    assert all(c.twin.color == c.subject.color and c.twin.shape == c.subject.shape for c in twins)


def test_material_is_heard_not_seen():
    metal, wood = clip_with(material="metal"), clip_with(material="wood")
    assert np.array_equal(render_frames(metal, VideoWorldConfig()), render_frames(wood, VideoWorldConfig()))
    cfg = VideoWorldConfig()
    for clip in (metal, wood, clip_with(material="glass"), clip_with(material="rubber")):
        audio = render_audio(dataclasses.replace(clip, subject=dataclasses.replace(
            clip.subject, action="bouncing", period=0.8)), cfg)
        spectrum = np.abs(np.fft.rfft(audio))
        freqs = np.fft.rfftfreq(len(audio), 1 / cfg.sample_rate)
        spectrum[freqs < 100] = 0  # the mains hum
        assert abs(freqs[spectrum.argmax()] - MATERIALS[clip.material][0][0]) < 30, clip.material


def test_strikes_follow_the_subject_motion_and_the_twin_is_silent():
    cfg = VideoWorldConfig()
    clip = clip_with(subject_action="bouncing", subject_period=0.9, material="wood")
    twin = dataclasses.replace(clip.subject, action="falling", start=0.6, direction="down")
    clip = dataclasses.replace(clip, twin=twin)
    strikes = trajectory(clip.subject, cfg)[3]
    assert strikes == pytest.approx([0.9, 1.8, 2.7, 3.6])
    landing = trajectory(twin, cfg)[3]
    assert len(landing) == 1 and min(abs(landing[0] - s) for s in strikes) > 0.1
    loudness = envelope(render_audio(clip, cfg), cfg.sample_rate)
    quiet = np.median(loudness)
    for s in strikes:  # wood knocks within 10 ms of each landing, far above the background
        assert loudness[int(s / 0.01)] > 10 * quiet
    assert loudness[int(landing[0] / 0.01)] < 2 * quiet  # the twin's landing makes no sound


def test_every_action_stays_on_screen_and_only_rolling_and_spinning_turn():
    cfg = VideoWorldConfig()
    for action, direction, x0, speed in (("rolling", "right", 0.3, 0.55), ("rolling", "left", 0.7, 0.55),
                                         ("sliding", "left", 0.85, 0.55), ("bouncing", "up and down", 0.5, 0.0),
                                         ("spinning", "around", 0.8, 0.0), ("falling", "down", 0.2, 0.0)):
        mover = Mover("red", "square", action, direction, x0, speed / cfg.duration, 0.6, 1.5)
        x, y, angle, strikes = trajectory(mover, cfg)
        r = 0.12 * cfg.frame_size
        assert len(x) == cfg.frames and (bool(strikes) != (action == "sliding"))  # sliding scrapes instead
        assert (x - r > 0).all() and (x + r < cfg.frame_size).all() and (y - r > 0).all()
        assert (y + r <= 0.85 * cfg.frame_size + 1e-9).all()  # never below the floor
        if action in ("rolling", "spinning"):
            assert abs(angle[-1] - angle[0]) > np.pi  # turning is visible
        else:
            assert (angle == 0).all()
        if action == "falling":
            assert y[0] < y[-1] == pytest.approx(0.85 * cfg.frame_size - r)


def test_clip_files_decode_with_both_streams_of_the_stated_length(tmp_path):
    clip = sample_clip(SMALL, "msrvtt", 3, "train")
    frames, audio = render_frames(clip, SMALL), render_audio(clip, SMALL)
    for suffix, codecs in ((".mp4", ("h264", "aac")), (".avi", ("mpeg4", "mp3"))):
        path = tmp_path / f"clip{suffix}"
        write_clip(path, frames, SMALL.fps, audio, SMALL.sample_rate)
        with av.open(str(path)) as probe:  # what ffprobe reports: a video and an audio stream, their lengths
            video, sound = probe.streams.video[0], probe.streams.audio[0]
            assert (video.codec_context.name, sound.codec_context.name[:3]) == codecs
            for stream in (video, sound):
                assert float(stream.duration * stream.time_base) == pytest.approx(SMALL.duration, abs=0.15)
        decoded = read_clip(path)
        assert decoded.frames.shape == frames.shape and decoded.fps == SMALL.fps
        assert np.abs(decoded.frames.astype(int) - frames).mean() < 12  # lossy, but the same pictures
        assert decoded.sample_rate == SMALL.sample_rate
        assert len(decoded.audio) >= len(audio)
        if suffix == ".mp4":  # AAC's priming is trimmed: the samples line up
            assert np.corrcoef(decoded.audio[: len(audio)], audio)[0, 1] > 0.8
    with pytest.raises(ValueError, match="suffix"):
        write_clip(tmp_path / "clip.mkv", frames, SMALL.fps, audio, SMALL.sample_rate)
    (tmp_path / "broken.mp4").write_bytes(b"not a video")
    with pytest.raises(InputError, match="cannot decode"):
        read_clip(tmp_path / "broken.mp4")


def test_a_clip_written_again_is_the_same_bytes(tmp_path):
    """The world's files are a function of the params: a clip written several times in one process gives one file
    (without x264's cpu-independent mode the H.264 stream varied from write to write)."""
    clip = sample_clip(SMALL, "msrvtt", 5, "train")
    frames, audio = render_frames(clip, SMALL), render_audio(clip, SMALL)
    for suffix in (".mp4", ".avi"):
        files = set()
        for k in range(10):
            write_clip(tmp_path / f"clip{k}{suffix}", frames, SMALL.fps, audio, SMALL.sample_rate)
            files.add((tmp_path / f"clip{k}{suffix}").read_bytes())
        assert len(files) == 1, suffix


def test_datasets_are_written_in_the_formats_the_readers_take(tmp_path):
    msvd = write_dataset(SMALL, "msvd", tmp_path / "msvd", progress=False)
    videos = read_msvd(tmp_path / "msvd" / "AllVideoDescriptions.txt", tmp_path / "msvd" / "youtube_mapping.txt",
                       num_videos=12)
    assert check_standard_splits(videos, "msvd", excerpt=True) == split_sizes("msvd", 12)
    assert [v.captions for v in videos.values()] == [c.captions for c in msvd]
    assert len(list((tmp_path / "msvd" / "YouTubeClips").glob("*_*_*.avi"))) == 12
    msrvtt = write_dataset(SMALL, "msrvtt", tmp_path / "msrvtt", progress=False)
    videos = read_msrvtt(tmp_path / "msrvtt" / "videodatainfo.json")
    assert check_standard_splits(videos, "msrvtt", excerpt=True) == split_sizes("msrvtt", 14)
    assert [(v.captions, v.category is not None) for v in videos.values()] == [(c.captions, True) for c in msrvtt]
    assert sorted(p.name for p in (tmp_path / "msrvtt" / "videos").iterdir()) == sorted(
        f"{c.video_id}.mp4" for c in msrvtt)
    assert not list(tmp_path.glob(".*tmp"))  # written in place only when complete


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="clips and captions_per_clip"):
        VideoWorldConfig(clips={"msvd": 20})
    with pytest.raises(ValueError, match="at least 10 clips"):
        VideoWorldConfig(clips={"msvd": 5, "msrvtt": 20})
