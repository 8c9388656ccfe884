"""What a reader of an MLflow run sees besides the curves: the qualitative examples drawn as pictures (drawing.py:
deterministic PNGs, fixed width, wrapped text, a video clip's frame strip)."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from qualitative_examples import chunks, picture

from crossmodal import drawing

LONG = "a large checkered red square to the left of a small dotted green circle above a blue star " * 2


def test_a_panel_is_the_same_bytes_every_time_and_carries_no_time_stamp():
    first = drawing.png_bytes(drawing.caption_panel(picture(), "a red circle", ["a red ball", LONG]))
    second = drawing.png_bytes(drawing.caption_panel(picture(), "a red circle", ["a red ball", LONG]))
    assert first == second
    assert chunks(first) == ["IHDR", "IDAT", "IEND"]  # no tIME, tEXt or other metadata
    assert first != drawing.png_bytes(drawing.caption_panel(picture(), "a blue circle", ["a red ball", LONG]))


def test_panel_size_picture_and_wrapped_text():
    face = drawing.font()
    lines = drawing.wrap(LONG, 200, face)
    assert len(lines) > 2 and all(face.getlength(line) <= 200 for line in lines)
    assert " ".join(lines) == " ".join(LONG.split())  # nothing lost or reordered
    assert drawing.wrap("", 200, face) == [""]

    line = sum(face.getmetrics()) + drawing.LINE_GAP
    short = drawing.caption_panel(picture(size=96), "a red circle", ["a red ball"])
    assert short.size == (drawing.PANEL_WIDTH, 3 * drawing.MARGIN + 192 + 2 * line)  # 96 px enlarged 2x
    wrapped = drawing.caption_panel(picture(size=96), "a red circle", [LONG])
    extra = len(drawing.wrap(f"ref 1: {LONG}", drawing.PANEL_WIDTH - 2 * drawing.MARGIN, face)) - 1
    assert extra >= 1 and wrapped.height == short.height + extra * line
    # the 96-pixel image, enlarged 2x without blurring, centred at the top
    x0 = (drawing.PANEL_WIDTH - 192) // 2
    assert np.array_equal(np.asarray(short)[drawing.MARGIN:drawing.MARGIN + 192:2, x0:x0 + 192:2],
                          np.asarray(picture(size=96)))
    no_picture = drawing.caption_panel(None, "a red circle", ["a red ball"], note="no picture")
    assert no_picture.size == (drawing.PANEL_WIDTH, 2 * drawing.MARGIN + 3 * line)


def test_frame_strip_of_a_synthetic_clip():
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)]
    frames = [np.full((24, 32, 3), c, np.uint8) for c in colours]  # H x W x 3 arrays, as a video reader gives
    strip = drawing.frame_strip(frames, height=48, gap=4)
    assert strip.size == (4 * 64 + 3 * 4, 48)
    assert [strip.getpixel((k * 68 + 30, 20)) for k in range(4)] == colours
    assert strip.getpixel((65, 20)) == drawing.BACKGROUND  # the gap
    panel = drawing.caption_panel(strip, "a red then a green square", ["squares change colour"])
    assert panel.width == drawing.PANEL_WIDTH
    assert drawing.png_bytes(panel) == drawing.png_bytes(drawing.caption_panel(
        drawing.frame_strip([Image.fromarray(f) for f in frames], height=48, gap=4), "a red then a green square",
        ["squares change colour"]))
    with pytest.raises(ValueError):
        drawing.frame_strip([])
