"""Animation frames of a run drawn with PIL alone, for GIF and MP4 export without a browser.

Each frame shows the image after iteration j next to the token grid, coloured exactly like
`figures.window_figure`, with a caption and a legend. Frame sizes are multiples of 16 so video
encoders take them as they are.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import imageio.v3 as iio
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from specviz.trace import Trace
from specviz.viz.analysis import GridState, grid_state
from specviz.viz.palette import BACKGROUND, FOREGROUND, LABELS, NOW_LABEL, colors, legend_states

Font = ImageFont.FreeTypeFont | ImageFont.ImageFont


def _round_up(value: int, multiple: int = 16) -> int:
    """Smallest multiple of `multiple` at least `value` (video codecs want such sizes)."""
    return -(-value // multiple) * multiple


def _text_width(font: Font, text: str) -> int:
    """Pixel width of one line of text."""
    left, _, right, _ = font.getbbox(text)
    return int(right - left)


def _legend_rows(font: Font, swatch: int, width: int, shown: set[str]) -> list[list[str]]:
    """Legend entries (cell states, then the outline) flowed into rows no wider than `width`."""
    rows: list[list[str]] = [[]]
    used = 0
    for key in (*legend_states(shown), "outline"):
        item = swatch + 4 + _text_width(font, LABELS.get(key, NOW_LABEL)) + 2 * swatch
        if rows[-1] and used + item > width:
            rows.append([])
            used = 0
        rows[-1].append(key)
        used += item
    return rows


def _image_panel(image: Image.Image | None, size: tuple[int, int], dark: bool, font: Font) -> Image.Image:
    """The generated image scaled to the grid's display size, or a blank panel saying there is none."""
    if image is not None:
        return image.convert("RGB").resize(size, Image.Resampling.NEAREST)
    panel = Image.new("RGB", size, colors(dark)["pending"])
    ImageDraw.Draw(panel).text((size[0] // 2, size[1] // 2), "no image", fill=FOREGROUND[dark], font=font, anchor="mm")
    return panel


def _draw_grid(draw: ImageDraw.ImageDraw, grid: GridState, origin: tuple[int, int], scale: int, dark: bool) -> None:
    """Cells in their state colours, the ones committed this iteration outlined."""
    palette = colors(dark)
    gap = 1 if scale >= 6 else 0
    line = max(1, scale // 8)
    x0, y0 = origin
    rows, cols = grid.state.shape
    for row in range(rows):
        for col in range(cols):
            left, top = x0 + col * scale, y0 + row * scale
            box = (left, top, left + scale - 1 - gap, top + scale - 1 - gap)
            draw.rectangle(box, fill=palette[grid.state[row, col]])
            if grid.now[row, col]:
                draw.rectangle(box, outline=palette["outline"], width=line)


def frame(trace: Trace, j: int, image: Image.Image | None, scale: int = 16, dark: bool = False) -> Image.Image:
    """One animation frame: image after iteration j, the grid by draft fate, caption and legend."""
    grid = grid_state(trace, j)
    it = trace.iterations[j]
    g = trace.geometry
    palette = colors(dark)
    font = ImageFont.load_default(size=int(np.clip(scale, 12, 20)))
    swatch = int(np.clip(scale, 12, 20))
    line = swatch + 8
    pad = max(8, scale // 2)
    panel = (g.cols * scale, g.rows * scale)
    caption = (
        f"iteration {j}/{len(trace.iterations) - 1}  tokens {it.start + len(it.committed)}/{len(g.layout)}  NFE {j + 1}"
    )
    content = max(2 * panel[0] + pad, _text_width(font, caption))
    legend = _legend_rows(font, swatch, content, set(grid.state.flat))
    top = pad + line
    legend_top = top + panel[1] + pad
    canvas = Image.new(
        "RGB", (_round_up(content + 2 * pad), _round_up(legend_top + len(legend) * line + pad)), BACKGROUND[dark]
    )
    draw = ImageDraw.Draw(canvas)
    draw.text((pad, pad), caption, fill=FOREGROUND[dark], font=font)
    canvas.paste(_image_panel(image, panel, dark, font), (pad, top))
    _draw_grid(draw, grid, (2 * pad + panel[0], top), scale, dark)
    for index, keys in enumerate(legend):
        x, y = pad, legend_top + index * line
        for key in keys:
            box = (x, y, x + swatch - 1, y + swatch - 1)
            if key == "outline":
                draw.rectangle(box, outline=palette["outline"], width=max(2, swatch // 6))
            else:
                draw.rectangle(box, fill=palette[key])
            label = LABELS.get(key, NOW_LABEL)
            draw.text((x + swatch + 4, y + swatch // 2), label, fill=FOREGROUND[dark], font=font, anchor="lm")
            x += swatch + 4 + _text_width(font, label) + 2 * swatch
    return canvas


def animation(trace: Trace, images: list[Image.Image | None], scale: int = 16, dark: bool = False) -> list[Image.Image]:
    """One frame per iteration; images[j] is the image after iteration j (or None)."""
    if len(images) != len(trace.iterations):
        raise ValueError(f"{len(images)} images for {len(trace.iterations)} iterations; give one per iteration")
    return [frame(trace, j, image, scale, dark) for j, image in enumerate(images)]


def _stack(frames: list[Image.Image]) -> np.ndarray:
    """Frames as one (n, height, width, 3) array, refusing an empty or ragged list."""
    if not frames:
        raise ValueError("no frames to save")
    arrays = [np.asarray(f.convert("RGB")) for f in frames]
    if len({a.shape for a in arrays}) > 1:
        raise ValueError("all frames must have the same size")
    return np.stack(arrays)


def save_gif(frames: list[Image.Image], path: str | Path, fps: float = 8) -> None:
    """Write the frames as a looping GIF, playable anywhere."""
    iio.imwrite(path, _stack(frames), extension=".gif", duration=1000 / fps, loop=0)


def save_mp4(frames: list[Image.Image], path: str | Path, fps: float = 8) -> None:
    """Write the frames as an H.264 MP4, smaller than a GIF for long runs."""
    if importlib.util.find_spec("imageio_ffmpeg") is None:
        raise RuntimeError("MP4 export needs the imageio-ffmpeg package: pip install imageio-ffmpeg")
    iio.imwrite(path, _stack(frames), extension=".mp4", plugin="FFMPEG", fps=fps, codec="libx264")
