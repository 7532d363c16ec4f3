"""The exported animations (GIF and MP4) of the shipped red-apple traces, read back from the files.

SJD needs 88 passes for the 256 tokens AR makes in 256. Exported beside AR, frame i shows both runs
after i + 1 passes: SJD is complete at frame 87 and waits, marked done, while AR goes on to frame 255.
Images come from a stand-in decoder (one colour per token, grey where nothing is generated yet), so
no model is loaded; the frames are checked at the token grid's cell centres, where colours are exact.
"""

import importlib.util
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from PIL import Image, ImageColor

from specviz.metrics import tokens_through
from specviz.trace import Trace
from specviz.viz import Panel, iteration_after, slide_frame, slide_title, write_animation
from specviz.viz import frames as frames_module
from specviz.viz.frames import (
    HOLD_LAST_SECONDS,
    LABEL_LINE,
    MARGIN,
    SLIDE_SIZE,
    SUBTITLE_LINE,
    TITLE_LINE,
    VIDEO_FPS,
    check_same_run,
    frames_per_pass,
    gif_durations,
)
from specviz.viz.palette import BACKGROUND, colors

EXAMPLES = Path(__file__).resolve().parents[1] / "specviz" / "data" / "examples"
needs_ffmpeg = pytest.mark.skipif(importlib.util.find_spec("imageio_ffmpeg") is None, reason="needs imageio-ffmpeg")


@pytest.fixture(scope="module")
def ar() -> Trace:
    return Trace.load(EXAMPLES / "red-apple-ar.json")


@pytest.fixture(scope="module")
def sjd() -> Trace:
    return Trace.load(EXAMPLES / "red-apple-sjd.json")


def _images(trace: Trace):
    """A stand-in decoder: the image after iteration j, one 4x4 patch per token in a colour of its own."""

    def image_at(j: int) -> Image.Image:
        g = trace.geometry
        cells = np.full((g.rows * g.cols, 3), 200, dtype=np.uint8)
        tokens = np.array(tokens_through(trace, j))
        cells[: len(tokens)] = np.stack([tokens * 37 % 256, tokens * 91 % 256, tokens * 13 % 256], axis=1)
        picture = cells.reshape(g.rows, g.cols, 3).repeat(4, axis=0).repeat(4, axis=1)
        return Image.fromarray(picture)

    return image_at


@pytest.fixture(scope="module")
def race_files(sjd, ar, tmp_path_factory) -> list[Path]:
    """SJD beside AR, as GIF and (where imageio-ffmpeg is installed) MP4, written once."""
    out = tmp_path_factory.mktemp("race")
    paths = [out / "race.gif"] + ([out / "race.mp4"] if importlib.util.find_spec("imageio_ffmpeg") else [])
    return write_animation(sjd, _images(sjd), paths, ar=ar, ar_image_at=_images(ar))


def _gif_frames(path: Path) -> tuple[list[np.ndarray], list[int]]:
    with Image.open(path) as gif:
        pictures, durations = [], []
        for index in range(gif.n_frames):
            gif.seek(index)
            pictures.append(np.asarray(gif.convert("RGB")))
            durations.append(gif.info["duration"])
    return pictures, durations


def _grid_states(picture: np.ndarray, traces: list[Trace]) -> list[np.ndarray]:
    """Each panel's grid read back from a frame: the state whose colour is at every cell's centre."""
    layout = frames_module._slide_layout(traces)
    g, scale = traces[0].geometry, layout.scale
    names = {ImageColor.getrgb(color): state for state, color in colors().items() if state != "outline"}
    left, top = layout.panels_xy
    panel_w = 2 * g.cols * scale + frames_module.INNER_GAP
    grids = []
    for index in range(len(traces)):
        x0 = left + index * (panel_w + frames_module.PANEL_GAP) + g.cols * scale + frames_module.INNER_GAP
        y0 = top + LABEL_LINE
        grids.append(
            np.array(
                [
                    [
                        names.get(tuple(picture[y0 + r * scale + scale // 2, x0 + c * scale + scale // 2]), "?")
                        for c in range(g.cols)
                    ]
                    for r in range(g.rows)
                ]
            )
        )
    return grids


def test_the_title_names_the_run_and_what_it_cost_against_ar(sjd, ar):
    headline, numbers, latency = slide_title(sjd, ar)
    assert headline == 'SJD vs AR · tiny · seed 0 · "red apple"'
    assert numbers == "SJD: NFE 88 vs AR's 256 for 256 tokens · 2.91x step compression · lossless"
    assert latency == "SJD: 1.18x latency speedup over AR"  # the race's verdict (these runs were timed once)
    alone = slide_title(sjd)
    assert alone[0] == 'SJD · tiny · seed 0 · "red apple"' and alone[1].startswith("SJD: NFE 88 for 256 tokens")


def test_runs_line_up_on_passes_and_a_finished_run_waits(sjd, ar):
    assert [iteration_after(sjd, n) for n in (1, 88, 89, 256)] == [0, 87, 87, 87]
    assert [iteration_after(ar, n) for n in (1, 88, 256)] == [0, 87, 255]
    with pytest.raises(ValueError, match="at least one pass"):
        iteration_after(ar, 0)


def test_only_the_ar_trace_of_the_same_run_goes_beside_a_method(sjd, ar):
    check_same_run(sjd, ar)
    with pytest.raises(ValueError, match="must be an AR trace, not sjd"):
        check_same_run(sjd, sjd)
    with pytest.raises(ValueError, match=r"another run \(different seed\)"):
        check_same_run(sjd, ar.model_copy(update={"seed": 1}))


def test_a_slide_frame_has_a_title_and_both_panels(sjd, ar):
    panels = [Panel(t, iteration_after(t, 40), _images(t)(iteration_after(t, 40))) for t in (sjd, ar)]
    picture = np.asarray(slide_frame(panels, slide_title(sjd, ar)))
    assert picture.shape == (SLIDE_SIZE[1], SLIDE_SIZE[0], 3)
    layout = frames_module._slide_layout([sjd, ar])
    background = np.array(ImageColor.getrgb(BACKGROUND[False]))
    band = picture[layout.title_y : layout.title_y + TITLE_LINE + SUBTITLE_LINE, MARGIN : SLIDE_SIZE[0] - MARGIN]
    inked = (np.abs(band.astype(int) - background).sum(axis=2) > 200).mean()
    assert 0.02 < inked < 0.5  # text across the title band, legible dark on white
    method_grid, ar_grid = _grid_states(picture, [sjd, ar])
    assert (ar_grid != "pending").sum() == 40  # AR made 40 tokens in 40 passes
    assert (method_grid == "committed").sum() > 40 and {"kept", "redrawn"} & set(method_grid.flat)  # SJD's window


def test_side_by_side_gif_lines_up_the_runs_and_holds_the_end(race_files, sjd, ar):
    gif = race_files[0]
    assert gif.stat().st_size < 8_000_000
    pictures, durations = _gif_frames(gif)
    assert len(pictures) == 256 and pictures[0].shape == (720, 1280, 3)  # one frame per AR pass, 1280x720
    assert durations[-1] == round(1000 * HOLD_LAST_SECONDS)  # the finished images stay before the loop
    assert set(durations[:-1]) <= {40, 50} and abs(sum(durations[:-1]) - 255 * 1000 / VIDEO_FPS) <= 10
    for index in (86, 87, 255):  # after 87 passes, after 88 (SJD's last), after 256 (AR's last)
        method_grid, ar_grid = _grid_states(pictures[index], [sjd, ar])
        assert "?" not in method_grid and "?" not in ar_grid
        assert (ar_grid != "pending").sum() == index + 1
        fixed = set(method_grid.flat) <= {"committed", "accepted", "rejected"}  # no draft left open
        assert fixed == (index >= 87)  # SJD is complete from its 88th pass on, and stays so
    assert (ar_grid == "committed").all()  # AR complete at the last frame


def test_gif_frames_are_the_drawn_frames(race_files, sjd, ar):
    """The shared palette keeps the state colours and the background exact; only anti-aliased text and
    image colours may move to a neighbouring palette entry."""
    pictures, _ = _gif_frames(race_files[0])
    passes = 40
    panels = [Panel(t, iteration_after(t, passes), _images(t)(iteration_after(t, passes))) for t in (sjd, ar)]
    drawn = np.asarray(slide_frame(panels, slide_title(sjd, ar)))
    differing = np.abs(pictures[passes - 1].astype(int) - drawn).sum(axis=2) > 0
    assert differing.mean() < 0.01
    assert _grid_states(pictures[passes - 1], [sjd, ar])[1].tolist() == _grid_states(drawn, [sjd, ar])[1].tolist()


@needs_ffmpeg
def test_side_by_side_mp4_repeats_frames_at_a_smooth_rate(race_files):
    mp4 = race_files[1]
    meta = iio.immeta(mp4, plugin="FFMPEG")
    assert meta["fps"] == VIDEO_FPS and tuple(meta["size"]) == (1280, 720)
    video = iio.imread(mp4, plugin="FFMPEG")
    hold = round(HOLD_LAST_SECONDS * VIDEO_FPS)
    assert len(video) == 255 * frames_per_pass(256) + hold  # one frame a pass, then two seconds held
    assert np.abs(video[-1].astype(int) - video[-hold].astype(int)).max() < 8  # the hold: one picture


def test_a_single_run_still_exports_alone(sjd, tmp_path):
    gif = write_animation(sjd, _images(sjd), [tmp_path / "sjd.gif"])[0]
    pictures, durations = _gif_frames(gif)
    assert len(pictures) == 88 and pictures[0].shape == (720, 1280, 3)
    assert frames_per_pass(88) == 3 and set(durations[:-1]) <= {120, 130} and durations[-1] == 2000
    (grid,) = _grid_states(pictures[-1], [sjd])
    assert (grid != "pending").all()


def test_pacing_and_gif_durations():
    assert [frames_per_pass(n) for n in (1, 40, 88, 256, 400)] == [3, 3, 3, 1, 1]
    durations = gif_durations(25, 1000 / 24)
    assert durations[-1] == 2000 and sum(durations[:-1]) == 1000  # 24 frames of 1/24 s: one second
