"""Qualitative examples as pictures: an input (an image, or a video clip's frame strip) with the model's caption
and the reference captions under it, one PNG per example, for the predictions folder and the MLflow run.

Drawn with Pillow's default font (`ImageFont.load_default`), text wrapped to the panel's width. The bytes are a
pure function of the inputs and the pinned Pillow: PNGs are written without metadata chunks (no time stamp), so
DVC sees the same output when a stage reruns with the same predictions.
"""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .io import atomic_path

PANEL_WIDTH = 480  # pixels; the picture is scaled to fit it, text wraps to it
PICTURE_HEIGHT = 240  # the picture's height on the panel (whole-number upscaling, nearest neighbour)
FONT_SIZE = 14
MARGIN = 10
LINE_GAP = 4
BACKGROUND, INK, MODEL_INK, NOTE_INK = (255, 255, 255), (40, 40, 40), (0, 70, 160), (150, 60, 0)


def font(size: int = FONT_SIZE) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def wrap(text: str, width: int, face=None) -> list[str]:
    """`text` split into lines no wider than `width` pixels, at spaces (a word wider than a line stands alone)."""
    face = face or font()
    lines: list[str] = []
    for word in text.split():
        if lines and face.getlength(f"{lines[-1]} {word}") <= width:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return lines or [""]


def fit(picture: Image.Image, width: int, height: int) -> Image.Image:
    """`picture` in RGB, enlarged by a whole factor (nearest neighbour: the synthetic world's flat colours stay
    sharp) or shrunk, to fit within width × height."""
    picture = picture.convert("RGB")
    scale = min(width / picture.width, height / picture.height)
    if scale >= 1:
        factor = int(scale)
        return picture.resize((picture.width * factor, picture.height * factor), Image.Resampling.NEAREST)
    size = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
    return picture.resize(size, Image.Resampling.LANCZOS)


def caption_panel(picture: Image.Image | None, caption: str, references: Sequence[str], note: str | None = None,
                  width: int = PANEL_WIDTH) -> Image.Image:
    """One example: the picture (centred; none when `picture` is None), an optional note (why there is no
    picture, say), the model's caption and the references, each wrapped. The width is fixed, the height follows
    from the picture and the number of text lines."""
    face, text_width = font(), width - 2 * MARGIN
    line_height = sum(face.getmetrics()) + LINE_GAP
    blocks = ([(NOTE_INK, wrap(note, text_width, face))] if note else []) + [
        (MODEL_INK, wrap(f"model: {caption}", text_width, face)),
        *((INK, wrap(f"ref {k}: {ref}", text_width, face)) for k, ref in enumerate(references, 1))]
    shown = fit(picture, text_width, PICTURE_HEIGHT) if picture is not None else None
    top = MARGIN + (shown.height + MARGIN if shown is not None else 0)
    height = top + sum(len(lines) for _, lines in blocks) * line_height + MARGIN
    panel = Image.new("RGB", (width, height), BACKGROUND)
    if shown is not None:
        panel.paste(shown, ((width - shown.width) // 2, MARGIN))
    draw = ImageDraw.Draw(panel)
    y = top
    for colour, lines in blocks:
        for line in lines:
            draw.text((MARGIN, y), line, fill=colour, font=face)
            y += line_height
    return panel


def frame_strip(frames: Sequence[Image.Image | np.ndarray], height: int = 96, gap: int = 4) -> Image.Image:
    """A video clip's frames side by side (each scaled to `height`, `gap` pixels apart): the picture of a clip's
    `caption_panel`. Frames are PIL images or H × W × 3 uint8 arrays."""
    if not frames:
        raise ValueError("frame_strip needs at least one frame")
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) if isinstance(f, np.ndarray) else f for f in frames]
    images = [im.convert("RGB").resize((max(1, round(im.width * height / im.height)), height),
                                       Image.Resampling.NEAREST if im.height <= height else Image.Resampling.LANCZOS)
              for im in images]
    strip = Image.new("RGB", (sum(im.width for im in images) + gap * (len(images) - 1), height), BACKGROUND)
    x = 0
    for im in images:
        strip.paste(im, (x, 0))
        x += im.width + gap
    return strip


def png_bytes(image: Image.Image) -> bytes:
    """The PNG encoding of `image`, with no metadata chunks (no time stamp): equal images give equal bytes."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False, compress_level=9)
    return buffer.getvalue()


def save_png(image: Image.Image, path: str | os.PathLike) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(png_bytes(image))
    return Path(path)
