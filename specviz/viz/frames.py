"""Animation frames of a run drawn with PIL alone, for GIF and MP4 export without a browser.

Each frame shows the image after iteration j next to the token grid, coloured exactly like
`figures.window_figure` (for a draft-tree run: its accepted path and the token drawn after it), with a
caption and a legend. Frame sizes are multiples of 16 so video encoders take them as they are.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import imageio.v2
import imageio.v3 as iio
import numpy as np
from PIL import Image, ImageColor, ImageDraw, ImageFont

from specviz.trace import Trace
from specviz.viz.analysis import GridState, grid_state, has_trees
from specviz.viz.palette import BACKGROUND, FOREGROUND, LABELS, NOW_LABEL, colors, legend_states

Font = ImageFont.FreeTypeFont | ImageFont.ImageFont
MAX_FRAMES = 400  # longer runs are subsampled evenly for export
MAX_FRAME_WIDTH = 2048  # pixels; wide grids are drawn with smaller cells
GIF_PIXEL_BUDGET = 200_000_000  # pixels over all GIF frames (one byte each until the file is written)
HOLD_LAST_SECONDS = 2.0  # exports pause on the finished image before they loop, as a slide wants


def _round_up(value: int, multiple: int = 16) -> int:
    """Smallest multiple of `multiple` at least `value` (video codecs want such sizes)."""
    return -(-value // multiple) * multiple


def _text_width(font: Font, text: str) -> int:
    """Pixel width of one line of text."""
    left, _, right, _ = font.getbbox(text)
    return int(right - left)


def _legend_rows(font: Font, swatch: int, width: int, shown: set[str], trees: bool) -> list[list[str]]:
    """Legend entries (cell states, then the outline) flowed into rows no wider than `width`."""
    rows: list[list[str]] = [[]]
    used = 0
    for key in (*legend_states(shown, trees), "outline"):
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


def _grid_picture(grid: GridState, scale: int, dark: bool) -> Image.Image:
    """Cells in their state colours, the ones committed this iteration outlined; drawn as arrays, so a
    grid of 65,536 cells costs milliseconds, not a rectangle call per cell."""
    palette = colors(dark)
    rows, cols = grid.state.shape
    states = {state: index for index, state in enumerate(palette)}
    rgb = np.array([ImageColor.getrgb(color) for color in palette.values()], dtype=np.uint8)
    cells = rgb[np.vectorize(states.__getitem__, otypes=[int])(grid.state)]  # (rows, cols, 3)
    gap = 1 if scale >= 6 else 0
    line = max(1, scale // 8)
    inside = np.zeros((scale, scale), dtype=bool)
    inside[: scale - gap, : scale - gap] = True
    border = inside.copy()
    border[line : scale - gap - line, line : scale - gap - line] = False
    pixels = np.repeat(np.repeat(cells, scale, axis=0), scale, axis=1)
    background = np.array(ImageColor.getrgb(BACKGROUND[dark]), dtype=np.uint8)
    pixels[~np.tile(inside, (rows, cols))] = background
    outlined = np.repeat(np.repeat(grid.now, scale, axis=0), scale, axis=1) & np.tile(border, (rows, cols))
    pixels[outlined] = np.array(ImageColor.getrgb(palette["outline"]), dtype=np.uint8)
    return Image.fromarray(pixels)


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
    legend = _legend_rows(font, swatch, content, set(grid.state.flat), has_trees(trace))
    top = pad + line
    legend_top = top + panel[1] + pad
    canvas = Image.new(
        "RGB", (_round_up(content + 2 * pad), _round_up(legend_top + len(legend) * line + pad)), BACKGROUND[dark]
    )
    draw = ImageDraw.Draw(canvas)
    draw.text((pad, pad), caption, fill=FOREGROUND[dark], font=font)
    canvas.paste(_image_panel(image, panel, dark, font), (pad, top))
    canvas.paste(_grid_picture(grid, scale, dark), (2 * pad + panel[0], top))
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
    """One frame per iteration; images[j] is the image after iteration j (or None). For short traces;
    exports go through `write_animation`, which bounds frames, pixels and memory."""
    if len(images) != len(trace.iterations):
        raise ValueError(f"{len(images)} images for {len(trace.iterations)} iterations; give one per iteration")
    return [frame(trace, j, image, scale, dark) for j, image in enumerate(images)]


class ExportError(ValueError):
    """An animation that cannot be drawn within the export bounds; the message says why."""


def export_iterations(count: int, limit: int = MAX_FRAMES) -> list[int]:
    """Iterations to draw: all of them, or `limit` evenly spaced ones, the first and the last included."""
    if count <= limit:
        return list(range(count))
    return sorted({round(k * (count - 1) / (limit - 1)) for k in range(limit)})


def export_scale(trace: Trace) -> int:
    """Pixels per token cell so a frame (image and grid side by side) is at most MAX_FRAME_WIDTH wide."""
    cols = trace.geometry.cols
    scale = min(16, MAX_FRAME_WIDTH // (2 * cols + 4))
    if scale < 1:
        raise ExportError(
            f"a {trace.geometry.rows}x{cols} grid is too wide to animate (at most {MAX_FRAME_WIDTH // 2 - 2} columns)"
        )
    if trace.geometry.rows * scale > MAX_FRAME_WIDTH:
        raise ExportError(f"a {trace.geometry.rows}x{cols} grid is too tall to animate")
    return scale


def write_animation(
    trace: Trace,
    image_at: Callable[[int], Image.Image | None],
    paths: list[Path],
    fps: float = 8,
    dark: bool = False,
) -> list[Path]:
    """Write the run as GIF and/or MP4 files (by suffix), so that time and memory are bounded whatever
    the trace: at most MAX_FRAMES evenly spaced iterations, frames at most MAX_FRAME_WIDTH wide, MP4
    frames streamed to the encoder, and GIF frames (which the GIF format must hold until the end) kept
    as 8-bit palette images within GIF_PIXEL_BUDGET. `image_at(j)` is the image after iteration j, or
    None. Raises RuntimeError before writing anything where MP4 is asked for without imageio-ffmpeg."""
    suffixes = {path.suffix for path in paths}
    if not suffixes <= {".gif", ".mp4"}:
        raise ValueError(f"animations are .gif or .mp4, not {', '.join(sorted(suffixes - {'.gif', '.mp4'}))}")
    if ".mp4" in suffixes and importlib.util.find_spec("imageio_ffmpeg") is None:
        raise RuntimeError("MP4 export needs the imageio-ffmpeg package: pip install imageio-ffmpeg")
    scale = export_scale(trace)
    first = frame(trace, 0, image_at(0), scale, dark)
    limit = MAX_FRAMES
    if ".gif" in suffixes:
        limit = max(2, min(limit, GIF_PIXEL_BUDGET // (first.width * first.height)))
    steps = export_iterations(len(trace.iterations), limit)
    video = [
        imageio.v2.get_writer(p, fps=fps, codec="libx264", macro_block_size=16) for p in paths if p.suffix == ".mp4"
    ]
    palette_frames: list[Image.Image] = []
    try:
        for j in steps:
            picture = first if j == 0 else frame(trace, j, image_at(j), scale, dark)
            held = round(HOLD_LAST_SECONDS * fps) if j == steps[-1] else 1  # the finished image stays a moment
            for writer in video:
                for _ in range(held):
                    writer.append_data(np.asarray(picture.convert("RGB")))
            if ".gif" in suffixes:
                palette_frames.append(picture.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT))
    finally:
        for writer in video:
            writer.close()
    for path in (p for p in paths if p.suffix == ".gif"):
        durations = [round(1000 / fps)] * (len(palette_frames) - 1) + [round(1000 * HOLD_LAST_SECONDS)]
        palette_frames[0].save(
            path, save_all=True, append_images=palette_frames[1:], duration=durations, loop=0, optimize=False
        )
    return paths


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
