"""Animation frames of a run drawn with PIL alone, for GIF and MP4 export without a browser.

Two kinds of frame, both with the token grid coloured exactly like `figures.window_figure` (for a
draft-tree run: its accepted path and the token drawn after it). `frame` is compact: the image after
iteration j beside the grid, a caption and a legend (the app's PNG of one iteration). `slide_frame` is
what exported animations are made of, sized for a slide (1280x720): a title naming the run and what it
cost (beside AR, with its latency as the race says it), then one panel per run, the method beside AR
where the same run's AR trace is at hand, each after the same number of model passes, so that AR
visibly lags. Frame sizes are multiples of 16 so video encoders take them as they are.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import imageio.v2
import imageio.v3 as iio
import numpy as np
from PIL import GifImagePlugin, Image, ImageColor, ImageDraw, ImageFont

from specviz.core.catalogue import is_baseline
from specviz.core.errors import ExportError
from specviz.metrics import GridState, grid_state, has_trees, summary
from specviz.trace import Trace
from specviz.viz.narration import promise, ratio_text, run_verdict
from specviz.viz.palette import BACKGROUND, FOREGROUND, LABELS, NOW_LABEL, STATES, colors, legend_states

Font = ImageFont.FreeTypeFont | ImageFont.ImageFont
MAX_FRAMES = 400  # longer runs are subsampled evenly for export
MAX_FRAME_WIDTH = 2048  # pixels on either side of a frame; wide and tall grids are drawn with smaller cells
HOLD_LAST_SECONDS = 2.0  # exports pause on the finished image before they loop, as a slide wants
SLIDE_SIZE = (1280, 720)  # exported frames: 16:9 at a projector's width (a grid too big for it widens them)
VIDEO_FPS = 24  # MP4 frames per second; a model pass lasts whole frames, repeated, never interpolated
PLAY_SECONDS = 10.0  # the passes of an export play over about this long, whatever the run's length...
MAX_FRAMES_PER_PASS = 3  # ...but at least 8 passes a second (24 fps / 3), the pace exports always had


def _round_up(value: int, multiple: int = 16) -> int:
    """Smallest multiple of `multiple` at least `value` (video codecs want such sizes)."""
    return -(-value // multiple) * multiple


@functools.cache
def _default_font(size: int) -> Font:
    """Pillow's own font at `size` pixels, made once (text widths are remembered per font)."""
    return ImageFont.load_default(size=size)


@functools.lru_cache(maxsize=4096)
def _text_width(font: Font, text: str) -> int:
    """Pixel width of one line of text (remembered: every frame of an export measures the same labels)."""
    left, _, right, _ = font.getbbox(text)
    return int(right - left)


def _legend_item_width(font: Font, swatch: int, key: str) -> int:
    """Pixels one legend entry takes: swatch, label and the space before the next entry."""
    return swatch + 4 + _text_width(font, LABELS.get(key, NOW_LABEL)) + 2 * swatch


def _legend_rows(font: Font, swatch: int, width: int, shown: set[str], trees: bool) -> list[list[str]]:
    """Legend entries (cell states, then the outline) flowed into rows no wider than `width`."""
    rows: list[list[str]] = [[]]
    used = 0
    for key in (*legend_states(shown, trees), "outline"):
        item = _legend_item_width(font, swatch, key)
        if rows[-1] and used + item > width:
            rows.append([])
            used = 0
        rows[-1].append(key)
        used += item
    return rows


def _draw_legend_row(draw: ImageDraw.ImageDraw, keys: list[str], x: int, y: int, font: Font, swatch: int, dark: bool):
    """One row of legend entries from (x, y): a swatch in the state's colour (the outline as an outline)
    and its label."""
    palette = colors(dark)
    for key in keys:
        box = (x, y, x + swatch - 1, y + swatch - 1)
        if key == "outline":
            draw.rectangle(box, outline=palette["outline"], width=max(2, swatch // 6))
        else:
            draw.rectangle(box, fill=palette[key])
        label = LABELS.get(key, NOW_LABEL)
        draw.text((x + swatch + 4, y + swatch // 2), label, fill=FOREGROUND[dark], font=font, anchor="lm")
        x += _legend_item_width(font, swatch, key)


def _image_panel(image: Image.Image | None, size: tuple[int, int], dark: bool, font: Font) -> Image.Image:
    """The generated image scaled to the grid's display size, or a blank panel saying there is none;
    enlarged by nearest neighbour so each token's patch stays crisp, shrunk smoothly."""
    if image is not None:
        enlarging = image.width <= size[0] and image.height <= size[1]
        resample = Image.Resampling.NEAREST if enlarging else Image.Resampling.LANCZOS
        return image.convert("RGB").resize(size, resample)
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


DRAFT_FATES = ("accepted", "rejected", "kept", "redrawn", "reset", "new", "discarded")


GHOST_STRENGTH = 0.45  # a guessed cell shows its draft's pixels at this strength over the background: not yet real


def _cell_box(row: int, col: int, cell_w: float, cell_h: float) -> tuple[int, int, int, int]:
    return round(col * cell_w), round(row * cell_h), round((col + 1) * cell_w) - 1, round((row + 1) * cell_h) - 1


def pass_overlay(
    image: Image.Image, trace: Trace, j: int, dark: bool = False, drafted: Image.Image | None = None
) -> Image.Image:
    """The image (any size, the grid's aspect) with iteration j's drafts drawn on it: each drafted cell
    outlined in its fate's colour, so a race shows the window or tree at work on the picture itself.
    The cells of drafts that stay in the window (not committed by this pass) show their guessed
    pixels faded, from `drafted` (the same picture decoded with those drafts in place, see
    `drafted_tokens`), or a tint of their fate's colour where there is none; rows in flight with a window
    each (PJD) show every row's window so. A pass that drew a token in several rows without drafts (ZipAR)
    has its cells outlined: the front of rows in flight. Nothing drawn for a
    pass that drew one token without drafts (AR)."""
    grid = grid_state(trace, j)
    palette = colors(dark)
    rows, cols = grid.state.shape
    cell_w, cell_h = image.width / cols, image.height / rows
    line = max(2, round(min(cell_w, cell_h) / 8))
    canvas = image.convert("RGB")
    if drafted is not None:
        backdrop = Image.new("RGB", canvas.size, BACKGROUND[dark])
        guesses = drafted.convert("RGB").resize(canvas.size, Image.Resampling.NEAREST)
        ghost = Image.blend(backdrop, guesses, GHOST_STRENGTH)
    tint = Image.new("RGBA", canvas.size, (0, 0, 0, 0))
    draw, tint_draw = ImageDraw.Draw(canvas), ImageDraw.Draw(tint)
    for row, col in zip(*np.nonzero(np.isin(grid.state, DRAFT_FATES)), strict=True):
        box = _cell_box(row, col, cell_w, cell_h)
        color = ImageColor.getrgb(palette[grid.state[row, col]])
        if not grid.now[row, col]:  # not committed by this pass: its pixels are a guess
            if drafted is not None:
                inner = (box[0], box[1], box[2] + 1, box[3] + 1)
                canvas.paste(ghost.crop(inner), inner[:2])
            else:
                tint_draw.rectangle(box, fill=(*color, 110))
        draw.rectangle(box, outline=color, width=line)
    if trace.iterations[j].kind == "rows" and not trace.iterations[j].verifies_drafts:  # ZipAR's front
        for row, col in zip(*np.nonzero(grid.now), strict=True):
            box = _cell_box(row, col, cell_w, cell_h)
            draw.rectangle(box, outline=ImageColor.getrgb(palette["front"]), width=line)
    return Image.alpha_composite(canvas.convert("RGBA"), tint).convert("RGB")


class _FrameLayout(NamedTuple):
    """Where `frame` puts things at a given scale: the canvas size, the margin, a text line's height, the
    caption, the grid's panel size, the legend's rows and where they start."""

    size: tuple[int, int]
    pad: int
    line: int
    caption: str
    panel: tuple[int, int]
    legend: list[list[str]]
    legend_top: int


def _frame_layout(trace: Trace, j: int, scale: int, shown: set[str]) -> _FrameLayout:
    """The layout of iteration j's frame at `scale` pixels per cell, its legend listing `shown` states."""
    it = trace.iterations[j]
    g = trace.geometry
    font = _default_font(int(np.clip(scale, 12, 20)))
    swatch = int(np.clip(scale, 12, 20))
    line = swatch + 8
    pad = max(8, scale // 2)
    panel = (g.cols * scale, g.rows * scale)
    caption = (
        f"iteration {j}/{len(trace.iterations) - 1}  tokens {it.start + len(it.committed)}/{len(g.layout)}  NFE {j + 1}"
    )
    content = max(2 * panel[0] + pad, _text_width(font, caption))
    legend = _legend_rows(font, swatch, content, shown, has_trees(trace))
    legend_top = pad + line + panel[1] + pad
    size = (_round_up(content + 2 * pad), _round_up(legend_top + len(legend) * line + pad))
    return _FrameLayout(size, pad, line, caption, panel, legend, legend_top)


def frame(trace: Trace, j: int, image: Image.Image | None, scale: int = 16, dark: bool = False) -> Image.Image:
    """One animation frame: image after iteration j, the grid by draft fate, caption and legend. Refused
    with ExportError where it would be more than MAX_FRAME_WIDTH pixels on a side (before anything is
    drawn): `export_scale` gives the largest scale at which every frame of a trace fits."""
    grid = grid_state(trace, j)
    g = trace.geometry
    font = _default_font(int(np.clip(scale, 12, 20)))
    swatch = int(np.clip(scale, 12, 20))
    size, pad, line, caption, panel, legend, legend_top = _frame_layout(trace, j, scale, set(grid.state.flat))
    if max(size) > MAX_FRAME_WIDTH:
        raise ExportError(
            f"a frame of a {g.rows}x{g.cols} grid at {scale} pixels a cell would be {size[0]}x{size[1]} pixels; "
            f"the limit is {MAX_FRAME_WIDTH} on a side"
        )
    top = pad + line
    canvas = Image.new("RGB", size, BACKGROUND[dark])
    draw = ImageDraw.Draw(canvas)
    draw.text((pad, pad), caption, fill=FOREGROUND[dark], font=font)
    canvas.paste(_image_panel(image, panel, dark, font), (pad, top))
    canvas.paste(_grid_picture(grid, scale, dark), (2 * pad + panel[0], top))
    for index, keys in enumerate(legend):
        _draw_legend_row(draw, keys, pad, legend_top + index * line, font, swatch, dark)
    return canvas


def animation(trace: Trace, images: list[Image.Image | None], scale: int = 16, dark: bool = False) -> list[Image.Image]:
    """One frame per iteration; images[j] is the image after iteration j (or None). For short traces;
    exports go through `write_animation`, which bounds frames, pixels and memory."""
    if len(images) != len(trace.iterations):
        raise ValueError(f"{len(images)} images for {len(trace.iterations)} iterations; give one per iteration")
    return [frame(trace, j, image, scale, dark) for j, image in enumerate(images)]


def export_iterations(count: int, limit: int = MAX_FRAMES) -> list[int]:
    """Iterations to draw: all of them, or `limit` evenly spaced ones, the first and the last included."""
    if count <= limit:
        return list(range(count))
    return sorted({round(k * (count - 1) / (limit - 1)) for k in range(limit)})


def export_scale(trace: Trace) -> int:
    """Pixels per token cell, at most 16, so that every `frame` of the trace (image and grid side by side,
    caption above, legend below) is at most MAX_FRAME_WIDTH pixels wide and tall: a tall grid is drawn
    with smaller cells, as a wide one is. ExportError where even one pixel a cell does not fit."""
    g = trace.geometry
    every_state = set(STATES)  # the longest legend a frame of the trace can have
    last = len(trace.iterations) - 1  # its caption's numbers are the widest
    scale = min(16, MAX_FRAME_WIDTH // (2 * g.cols + 4), MAX_FRAME_WIDTH // g.rows)
    while scale >= 1 and max(_frame_layout(trace, last, scale, every_state).size) > MAX_FRAME_WIDTH:
        scale -= 1
    if scale < 1 and 2 * g.cols + 4 > MAX_FRAME_WIDTH:
        most = MAX_FRAME_WIDTH // 2 - 2
        raise ExportError(f"a {g.rows}x{g.cols} grid is too wide to animate (at most {most} columns)")
    if scale < 1:
        raise ExportError(
            f"a {g.rows}x{g.cols} grid is too tall to animate: at one pixel a cell its frame would be more than "
            f"{MAX_FRAME_WIDTH} pixels tall, the limit"
        )
    return scale


class Panel(NamedTuple):
    """One run in a slide frame: its trace, the iteration it has reached, and its image after it."""

    trace: Trace
    j: int
    image: Image.Image | None


# a slide's measures in pixels at SLIDE_SIZE's height, chosen to be read from the back of a room
MARGIN = 28
TITLE_PX, SUBTITLE_PX, LABEL_PX, LEGEND_PX = 34, 24, 26, 20
TITLE_LINE, SUBTITLE_LINE, LABEL_LINE, LEGEND_LINE = 44, 34, 38, 30  # their lines' heights
INNER_GAP, PANEL_GAP, SECTION_GAP = 12, 48, 20  # image to grid, panel to panel, title/panels/legend
DONE_MARK = "\u2713 done"


@functools.cache
def slide_font(size: int, bold: bool = False) -> Font:
    """DejaVu Sans from matplotlib's own data (already a requirement), since Pillow's default font has no
    accented letters and would print a prompt such as "crème brûlée" with boxes; Pillow's default font
    where that file is missing."""
    spec = importlib.util.find_spec("matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / "mpl-data" / "fonts" / "ttf" / ("DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf")
        if path.is_file():
            return ImageFont.truetype(str(path), size)
    return ImageFont.load_default(size=size)


def _fitted(text: str, font: Font, width: int) -> str:
    """The text, cut short with an ellipsis where it is wider than `width` pixels."""
    if _text_width(font, text) <= width:
        return text
    short, long = 0, len(text)  # the longest prefix that fits with the ellipsis, by bisection
    while short < long:
        middle = (short + long + 1) // 2
        short, long = (middle, long) if _text_width(font, text[:middle] + "\u2026") <= width else (short, middle - 1)
    return text[:short].rstrip() + "\u2026"


def slide_title(trace: Trace, ar: Trace | None = None) -> tuple[str, ...]:
    """The title lines of an exported animation: which run it is (method, model, seed, prompt last, so that
    a long prompt is what gets cut), then what it cost in model passes, against AR's passes where the same
    run's AR trace is given, and then its latency against AR as the race says it, with its interval."""
    name = trace.method.upper()
    prompt = " ".join(trace.prompt.split())
    headline = f'{name}{" vs AR" if ar is not None else ""} · {trace.model} · seed {trace.seed} · "{prompt}"'
    facts = summary(trace, ar)
    passes = f"NFE {trace.nfe} vs AR's {ar.nfe}" if ar is not None else f"NFE {trace.nfe}"
    kind = promise(trace.method, trace.lossless)
    compression = ratio_text(facts["step_compression"])
    numbers = f"{name}: {passes} for {facts['tokens']} tokens · {compression} step compression · {kind}"
    if ar is None:
        return headline, numbers
    return headline, numbers, f"{name}: {run_verdict(trace, ar)}"


def _grid(trace: Trace) -> object:
    """A run's grid, without the order it decided its cells in (zipar records its own; AR's raster needs none)."""
    return trace.geometry.model_copy(update={"order": None})


def check_same_run(trace: Trace, ar: Trace) -> None:
    """Refuse to set a trace beside an AR trace of another run: frames would compare different things."""
    if not is_baseline(ar.method):
        raise ValueError(f"the baseline to set beside {trace.method} must be an AR trace, not {ar.method}")
    same = ("model", "prompt", "seed", "sampling")
    differing = [field for field in same if getattr(trace, field) != getattr(ar, field)]
    if _grid(trace) != _grid(ar):
        differing.append("geometry")
    if differing:
        raise ValueError(f"the AR trace is of another run (different {', '.join(differing)})")


def iteration_after(trace: Trace, passes: int) -> int:
    """The iteration a run shows after `passes` model passes (its last once it has finished): what
    lines up two runs frame by frame on progress, not on clocks."""
    if passes < 1:
        raise ValueError(f"a frame shows the state after at least one pass, not {passes}")
    return min(passes, len(trace.iterations)) - 1


class _SlideLayout(NamedTuple):
    """Where a slide frame puts things: canvas size, pixels per token cell, where the title, the panels
    (their labels) and the legend start, and the legend's rows."""

    size: tuple[int, int]
    scale: int
    title_y: int
    panels_xy: tuple[int, int]
    legend_y: int
    legend: list[list[str]]


def _legend_keys(traces: Sequence[Trace]) -> tuple[set[str], bool]:
    """What the legend of a slide lists, from the whole runs (not the frame), so it never changes
    between frames: the optional states some pass shows, and whether any run verified trees."""
    shown = {fate for t in traces for it in t.iterations if it.kind in ("window", "continuous") for fate in it.fate}
    return shown, any(has_trees(t) for t in traces)


def title_lines(traces: Sequence[Trace]) -> int:
    """The lines of a slide's title (`slide_title`): the run, its passes, and its latency verdict where its AR
    run is beside it."""
    return 3 if len(traces) > 1 else 2


def _slide_layout(traces: Sequence[Trace]) -> _SlideLayout:
    """The largest whole number of pixels per token cell at which the panels (image and grid each) fit
    SLIDE_SIZE under the title and above the legend; a grid that would need less than one pixel widens
    the frame, up to MAX_FRAME_WIDTH."""
    g = traces[0].geometry
    count = len(traces)
    width, height = SLIDE_SIZE
    legend = _legend_rows(slide_font(LEGEND_PX), LEGEND_PX, width - 2 * MARGIN, *_legend_keys(traces))
    if not any(it.verifies_drafts for t in traces for it in t.iterations):  # AR alone: no fates to explain
        legend = [["committed", "pending", "outline"]]
    title_h = TITLE_LINE + (title_lines(traces) - 1) * SUBTITLE_LINE
    fixed_h = 2 * MARGIN + title_h + SECTION_GAP + LABEL_LINE + SECTION_GAP + len(legend) * LEGEND_LINE
    fixed_w = 2 * MARGIN + (count - 1) * PANEL_GAP + count * INNER_GAP
    scale = min((width - fixed_w) // (2 * count * g.cols), (height - fixed_h) // g.rows)
    if scale < 1:
        if fixed_w + 2 * count * g.cols > MAX_FRAME_WIDTH:
            most = (MAX_FRAME_WIDTH - fixed_w) // (2 * count)
            raise ExportError(f"a {g.rows}x{g.cols} grid is too wide to animate (at most {most} columns)")
        if fixed_h + g.rows > MAX_FRAME_WIDTH:
            raise ExportError(f"a {g.rows}x{g.cols} grid is too tall to animate")
        scale = 1
        width = _round_up(max(width, fixed_w + 2 * count * g.cols))
        height = _round_up(max(height, fixed_h + g.rows))
    panels_w = count * (2 * g.cols * scale + INNER_GAP) + (count - 1) * PANEL_GAP
    spare = (height - fixed_h - g.rows * scale) // 3  # above the title, under it, and below the legend
    title_y = MARGIN + spare
    panels_y = title_y + title_h + SECTION_GAP + spare
    legend_y = panels_y + LABEL_LINE + g.rows * scale + SECTION_GAP
    return _SlideLayout((width, height), scale, title_y, ((width - panels_w) // 2, panels_y), legend_y, legend)


def _draw_panel(canvas: Image.Image, panel: Panel, x: int, y: int, scale: int, finished: bool, dark: bool):
    """One run at (x, y): its name and progress above its image and its grid."""
    draw = ImageDraw.Draw(canvas)
    trace, j = panel.trace, panel.j
    g = trace.geometry
    it = trace.iterations[j]
    square = (g.cols * scale, g.rows * scale)
    bold, regular = slide_font(LABEL_PX, bold=True), slide_font(LABEL_PX)
    name = trace.method.upper()
    draw.text((x, y), name, fill=FOREGROUND[dark], font=bold)
    progress = f"NFE {j + 1} · {it.start + len(it.committed)}/{len(g.layout)} tokens"
    after = x + _text_width(bold, name) + LABEL_PX // 2
    room = 2 * square[0] + INNER_GAP - (after - x)
    if finished:
        room -= _text_width(bold, DONE_MARK) + LABEL_PX // 2
    progress = _fitted(progress, regular, room)
    draw.text((after, y), progress, fill=FOREGROUND[dark], font=regular)
    if finished:  # the finished side says so, in the colour of accepted drafts, while the other goes on
        done_x = after + _text_width(regular, progress) + LABEL_PX // 2
        draw.text((done_x, y), DONE_MARK, fill=colors(dark)["accepted"], font=bold)
    top = y + LABEL_LINE
    canvas.paste(_image_panel(panel.image, square, dark, regular), (x, top))
    # a hairline around the image, whose white background would otherwise run into the slide's
    draw.rectangle((x - 1, top - 1, x + square[0], top + square[1]), outline=colors(dark)["committed"])
    canvas.paste(_grid_picture(grid_state(trace, j), scale, dark), (x + square[0] + INNER_GAP, top))


def slide_frame(panels: Sequence[Panel], title: tuple[str, ...], dark: bool = False) -> Image.Image:
    """A frame of an exported animation, SLIDE_SIZE unless the grid needs more: the title, the panels
    side by side (image and grid each, labelled with the method and its progress, "done" once its run
    has finished) and one legend. Panels must share a grid, as a method and AR of one run do."""
    slide = _Slide([p.trace for p in panels], title, dark)
    return slide.frame(panels)


class _Slide:
    """The slide frames of one animation: the layout, title, legend and rules between the runs drawn
    once (they never change between frames), each frame a copy with the panels drawn on it."""

    def __init__(self, traces: Sequence[Trace], title: tuple[str, ...], dark: bool):
        if not traces:
            raise ValueError("a slide frame needs at least one run")
        if any(_grid(t) != _grid(traces[0]) for t in traces):
            raise ValueError("the runs in one frame must share a grid")
        self.traces, self.dark = list(traces), dark
        self.layout = layout = _slide_layout(traces)
        width = layout.size[0]
        self.backdrop = Image.new("RGB", layout.size, BACKGROUND[dark])
        draw = ImageDraw.Draw(self.backdrop)
        if len(title) != title_lines(traces):
            raise ValueError(f"a slide of {len(traces)} runs has {title_lines(traces)} title lines, not {len(title)}")
        y = layout.title_y
        for index, line in enumerate(title):
            font = slide_font(TITLE_PX, bold=True) if index == 0 else slide_font(SUBTITLE_PX)
            draw.text((MARGIN, y), _fitted(line, font, width - 2 * MARGIN), FOREGROUND[dark], font)
            y += TITLE_LINE if index == 0 else SUBTITLE_LINE
        g = traces[0].geometry
        self.panel_w = 2 * g.cols * layout.scale + INNER_GAP
        left, top = layout.panels_xy
        for index in range(1, len(traces)):  # a rule between the runs
            rule_x = left + index * (self.panel_w + PANEL_GAP) - PANEL_GAP // 2
            draw.line([(rule_x, top), (rule_x, layout.legend_y - SECTION_GAP)], colors(dark)["committed"], 2)
        legend_font = slide_font(LEGEND_PX)
        for row, keys in enumerate(layout.legend):
            row_w = sum(_legend_item_width(legend_font, LEGEND_PX, key) for key in keys) - 2 * LEGEND_PX
            y = layout.legend_y + row * LEGEND_LINE
            _draw_legend_row(draw, keys, (width - row_w) // 2, y, legend_font, LEGEND_PX, dark)
        # the only pixels a frame changes: the panels with their labels and the hairline under the image
        self.changing = (0, top, width, layout.legend_y - SECTION_GAP + 1)

    def frame(self, panels: Sequence[Panel]) -> Image.Image:
        """The backdrop with `panels` (one per run, in the slide's order) drawn on it."""
        if len(panels) != len(self.traces) or any(p.trace is not t for p, t in zip(panels, self.traces, strict=False)):
            raise ValueError("a slide's frames show the runs it was made for, in their order")
        canvas = self.backdrop.copy()
        left, top = self.layout.panels_xy
        for index, panel in enumerate(panels):
            finished = len(panels) > 1 and panel.j == len(panel.trace.iterations) - 1
            x = left + index * (self.panel_w + PANEL_GAP)
            _draw_panel(canvas, panel, x, top, self.layout.scale, finished, self.dark)
        return canvas


def frames_per_pass(passes: int, fps: float = VIDEO_FPS) -> int:
    """Video frames each drawn pass lasts, so that the passes play over about PLAY_SECONDS: 1 (AR's 256
    passes at 24 fps), up to MAX_FRAMES_PER_PASS (a short run is not rushed)."""
    return int(np.clip(round(fps * PLAY_SECONDS / max(1, passes)), 1, MAX_FRAMES_PER_PASS))


def gif_durations(count: int, frame_ms: float) -> list[int]:
    """Milliseconds each of `count` GIF frames stays: `frame_ms` rounded cumulatively to the format's
    centiseconds, so the GIF keeps the MP4's pace (24 fps is 4.17 cs a frame: 4, 4, 4, 5, ...), and
    HOLD_LAST_SECONDS for the last."""
    times = [round(index * frame_ms / 10) * 10 for index in range(count)]
    return [*(end - start for start, end in itertools.pairwise(times)), round(1000 * HOLD_LAST_SECONDS)]


UNCHANGED = 255  # the GIF palette index no pixel is given: it shows the previous frame through


class _GifPalette:
    """One palette for every GIF frame, so that each frame can be stored as what changed: the state and
    text colours exactly, with the shades that anti-aliased text takes, then the colours of a sample
    frame (its images). Pixels are mapped to their nearest entry exactly (Pillow's own mapping to a
    given palette is approximate: white came out #FCFCFC), through a table of every RGB colour filled
    in as colours are met, so a frame costs a lookup."""

    def __init__(self, sample: Image.Image, dark: bool):
        background = np.array(ImageColor.getrgb(BACKGROUND[dark]), dtype=float)
        inks = (ImageColor.getrgb(FOREGROUND[dark]), ImageColor.getrgb(colors(dark)["accepted"]))
        exact = [ImageColor.getrgb(c) for c in (*colors(dark).values(), BACKGROUND[dark], FOREGROUND[dark])]
        shades = [
            tuple(int(v) for v in np.rint(background + t * (np.array(ink, dtype=float) - background)))
            for ink in inks
            for t in np.linspace(0.1, 0.9, 9)
        ]
        fixed = list(dict.fromkeys(exact + shades))
        free = UNCHANGED - len(fixed)
        adaptive = sample.convert("RGB").quantize(free, method=Image.Quantize.MEDIANCUT).getpalette()[: 3 * free]
        entries = np.array([*(v for rgb in fixed for v in rgb), *adaptive], dtype=np.int64).reshape(-1, 3)
        self.colors = entries
        self.entries = [int(v) for v in entries.flat] + [int(v) for v in entries[0]] * (256 - len(entries))
        self._index = np.full(1 << 24, UNCHANGED, dtype=np.uint8)  # UNCHANGED here: not looked up yet
        order = np.arange(len(entries))[::-1]  # where colours repeat, the first entry wins
        self._index[self._pack(entries[order])] = order

    @staticmethod
    def _pack(rgb: np.ndarray) -> np.ndarray:
        rgb = rgb.astype(np.uint32)
        return (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]

    def indices(
        self, picture: Image.Image, box: tuple[int, int, int, int] | None = None, around: np.ndarray | None = None
    ) -> np.ndarray:
        """The frame as palette indices, (height, width) of uint8; given `box` (left, top, right, bottom)
        and `around`, the indices of a frame with the same pixels outside the box, only the box is mapped."""
        if box is None:
            return self._map(np.asarray(picture.convert("RGB")))
        left, top, right, bottom = box
        found = around.copy()
        found[top:bottom, left:right] = self._map(np.asarray(picture.crop(box).convert("RGB")))
        return found

    def _map(self, pixels: np.ndarray) -> np.ndarray:
        packed = self._pack(pixels)
        found = self._index[packed]
        if (found == UNCHANGED).any():
            new = np.unique(packed[found == UNCHANGED])
            for chunk in np.array_split(new, -(-len(new) // 4096)):  # bounded memory for photographic images
                rgb = np.stack([(chunk >> 16) & 255, (chunk >> 8) & 255, chunk & 255], axis=1).astype(np.int64)
                distance = ((rgb[:, None, :] - self.colors[None, :, :]) ** 2).sum(axis=2)
                self._index[chunk] = distance.argmin(axis=1)
            found = self._index[packed]
        return found


class _GifStream:
    """A looping GIF written frame by frame, so that memory stays one frame however long the run
    (Pillow's own writer holds every frame until the end). Frames share one palette, so each is stored
    as the rectangle that changed since the previous one, its unchanged pixels transparent (long runs
    of one index, which the GIF's LZW packs tightly); Pillow encodes the header and each frame."""

    def __init__(self, path: Path, palette: list[int]):
        self._file = path.open("wb")
        self._palette = palette
        self._previous: np.ndarray | None = None

    def _image(self, pixels: np.ndarray) -> Image.Image:
        image = Image.frombytes("P", (pixels.shape[1], pixels.shape[0]), np.ascontiguousarray(pixels).tobytes())
        image.putpalette(self._palette)
        return image

    def append(self, pixels: np.ndarray, duration_ms: int) -> None:
        """Add a frame, palette indices below UNCHANGED, shown for `duration_ms`."""
        settings: dict = {"duration": duration_ms, "disposal": 1}  # disposal 1: the next frame draws over it
        if self._previous is None:
            header, _ = GifImagePlugin.getheader(self._image(pixels), info={"loop": 0})
            self._file.write(b"".join(header))
            left, top, part = 0, 0, pixels
        else:
            rows, cols = np.nonzero(pixels != self._previous)
            if not len(rows):  # nothing changed: one transparent pixel carries the duration
                rows, cols = np.array([0]), np.array([0])
            top, left = int(rows.min()), int(cols.min())
            bottom, right = int(rows.max()) + 1, int(cols.max()) + 1
            part = pixels[top:bottom, left:right].copy()
            part[part == self._previous[top:bottom, left:right]] = UNCHANGED
            settings["transparency"] = UNCHANGED
        self._file.write(b"".join(GifImagePlugin.getdata(self._image(part), offset=(left, top), **settings)))
        self._previous = pixels

    def close(self) -> None:
        if not self._file.closed:
            self._file.write(b";")  # the GIF trailer
            self._file.close()


def write_animation(
    trace: Trace,
    image_at: Callable[[int], Image.Image | None],
    paths: list[Path],
    fps: float = VIDEO_FPS,
    dark: bool = False,
    ar: Trace | None = None,
    ar_image_at: Callable[[int], Image.Image | None] | None = None,
) -> list[Path]:
    """Write the run as GIF and/or MP4 files (by suffix) of slide frames: the title, then the run after
    1, 2, ... model passes; given `ar`, the AR trace of the same run, the two side by side after the
    same number of passes each (the finished one waits, marked done, while the other goes on).
    `image_at(j)` (and `ar_image_at(j)`) is the image after iteration j, or None.

    Time and memory stay bounded whatever the traces: at most MAX_FRAMES evenly spaced pass counts, and
    every frame streamed to its file as it is drawn (MP4: each pass repeated for `frames_per_pass`
    frames at `fps`; GIF: one frame per pass, of one shared palette). The last frame holds
    HOLD_LAST_SECONDS. Raises RuntimeError before writing anything where MP4 is asked for without
    imageio-ffmpeg, ValueError where `ar` is not an AR trace of the same run."""
    suffixes = {path.suffix for path in paths}
    if not suffixes <= {".gif", ".mp4"}:
        raise ValueError(f"animations are .gif or .mp4, not {', '.join(sorted(suffixes - {'.gif', '.mp4'}))}")
    if ".mp4" in suffixes and importlib.util.find_spec("imageio_ffmpeg") is None:
        raise RuntimeError("MP4 export needs the imageio-ffmpeg package: pip install imageio-ffmpeg")
    sides = [(trace, image_at)]
    if ar is not None:
        check_same_run(trace, ar)
        sides.append((ar, ar_image_at or (lambda j: None)))
    # a grid too big to animate is refused before any image is made
    slide = _Slide([side for side, _ in sides], slide_title(trace, ar), dark)
    images = [functools.lru_cache(maxsize=2)(at) for _, at in sides]  # a finished run's image is made once

    def after(passes: int) -> Image.Image:
        panels = [
            Panel(side, j, image(j))
            for (side, _), image in zip(sides, images, strict=True)
            for j in [iteration_after(side, passes)]
        ]
        return slide.frame(panels)

    longest = max(len(side.iterations) for side, _ in sides)
    steps = [j + 1 for j in export_iterations(longest, MAX_FRAMES)]
    last = after(longest)
    repeats = frames_per_pass(len(steps), fps)
    durations = gif_durations(len(steps), 1000 * repeats / fps)
    palette = _GifPalette(last, dark) if ".gif" in suffixes else None
    backdrop = palette.indices(slide.backdrop) if palette is not None else None
    writers: list = []
    try:
        for path in paths:
            if path.suffix == ".mp4":
                writers.append(imageio.v2.get_writer(path, fps=fps, codec="libx264", macro_block_size=16, quality=8))
            else:
                writers.append(_GifStream(path, palette.entries))
        for index, passes in enumerate(steps):
            picture = last if passes == longest else after(passes)
            held = round(HOLD_LAST_SECONDS * fps) if passes == longest else repeats  # the finished image stays
            indexed = palette.indices(picture, slide.changing, backdrop) if palette is not None else None
            for writer in writers:
                if isinstance(writer, _GifStream):
                    writer.append(indexed, durations[index])
                else:
                    for _ in range(held):
                        writer.append_data(np.asarray(picture))
    finally:
        for writer in writers:
            writer.close()
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
