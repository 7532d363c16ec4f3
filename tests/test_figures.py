"""Publication figures (`python -m specviz figures`) from the shipped example traces: every figure in
every format, vector where asked, at the asked size, reproducible, readable in grey; bad input refused."""

import itertools
import re
import zipfile
from pathlib import Path

import pytest
from matplotlib.colors import to_hex
from PIL import Image

import specviz
from specviz.cli import main
from specviz.metrics import acceptance_maps, grid_state, tokens_through
from specviz.trace import Trace
from specviz.viz.palette import STATES, colors
from specviz.viz.publication import (
    FIGURES,
    FORMATS,
    GREY_STEP,
    SLUG_CHARS,
    STYLES,
    FigureOptionError,
    Setting,
    acceptance_map,
    comparison_rows,
    file_stems,
    grey_mark,
    ratio_text,
    shown_iteration,
    state_lightness,
    window,
    write_figures,
)

EXAMPLES = Path(specviz.__file__).parent / "data" / "examples"
METHODS = ("ar", "sjd", "scd-mc")
DRAWN = [kind for kind in FIGURES if kind.draw is not None]
ANNOUNCED = [kind for kind in FIGURES if kind.draw is None]


def _example(method: str) -> tuple[str, Trace]:
    path = EXAMPLES / f"red-apple-{method}.json"
    return str(path), Trace.load(path)


@pytest.fixture(scope="module")
def examples() -> list[tuple[str, Trace]]:
    return [_example(method) for method in METHODS]


@pytest.fixture(scope="module")
def made(examples, tmp_path_factory):
    """Every figure of the shipped examples in every format, paper style, written once."""
    out = tmp_path_factory.mktemp("figures")
    return write_figures(examples, out, FORMATS, "paper")


def _pdf_size(path: Path) -> tuple[float, float]:
    """Page width and height in points."""
    box = re.search(rb"/MediaBox \[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", path.read_bytes())
    return float(box[1]), float(box[2])


def _svg_size(path: Path) -> tuple[float, float]:
    head = path.read_text()[:2000]
    return float(re.search(r'width="([\d.]+)pt"', head)[1]), float(re.search(r'height="([\d.]+)pt"', head)[1])


def _expected_names(examples) -> set[str]:
    names = set()
    for kind in DRAWN:
        if not kind.per_trace:
            names.add(kind.name)
            continue
        for (_, trace), stem in zip(examples, file_stems([t for _, t in examples]), strict=True):
            if kind.needs and not kind.needs.present(trace):
                continue
            suffix = f"-{shown_iteration(trace, None)}" if kind.at_iteration else ""
            names.add(f"{stem}-{kind.name}{suffix}")
    return names


def test_every_figure_of_every_example_in_every_format(made, examples):
    written = {(path.stem, path.suffix[1:]) for path in made.files}
    assert written == {(name, kind) for name in _expected_names(examples) for kind in FORMATS}
    assert {"ar-acceptance-map", "sjd-window-43", "scd-mc-iterations", "comparison"} <= {p.stem for p in made.files}
    assert all(path.stat().st_size > 1000 for path in made.files)


def test_pdf_and_svg_are_vector(made):
    for path in made.files:
        if path.suffix == ".pdf":
            data = path.read_bytes()
            assert b"/Subtype /Image" not in data, path.name
            assert b"/FontFile2" in data, f"{path.name}: fonts should be embedded TrueType (pdf.fonttype 42)"
        elif path.suffix == ".svg":
            text = path.read_text()
            assert "<image" not in text, path.name
            assert "<text" in text, f"{path.name}: text should stay text (svg.fonttype none)"


def test_sizes_are_as_asked(made):
    width_in, dpi = STYLES["paper"].width_in, STYLES["paper"].png_dpi
    for stem in {path.stem for path in made.files}:
        pdf, svg, png = (Path(made.files[0].parent, f"{stem}.{kind}") for kind in ("pdf", "svg", "png"))
        pdf_w, pdf_h = _pdf_size(pdf)
        svg_w, svg_h = _svg_size(svg)
        assert pdf_w == pytest.approx(72 * width_in) and svg_w == pytest.approx(72 * width_in), stem
        assert svg_h == pytest.approx(pdf_h, abs=0.01), stem
        assert 0.5 * 72 < pdf_h < 6 * 72, f"{stem}: {pdf_h / 72:.2f} in high"
        png_w, png_h = Image.open(png).size
        assert png_w == round(width_in * dpi) and png_h == pytest.approx(pdf_h / 72 * dpi, abs=1), stem


def test_skipped_figures_get_one_line_each(made, examples):
    """The window examples lack draft trees (for the depth map and the tree shapes) and continuous tokens
    (for the one figure still announced only)."""
    skipped = [note for note in made.notes if note.endswith("skipped")]
    lacking = [kind for kind in FIGURES if kind.needs and not any(kind.needs.present(t) for _, t in examples)]
    assert len(ANNOUNCED) == 1 and [kind.name for kind in lacking] == ["depth-map", "tree-shapes", "token-acceptance"]
    assert len(skipped) == len(lacking)
    for note, kind in zip(skipped, lacking, strict=True):
        assert "\n" not in note and note.endswith(f": {kind.title} skipped")
        assert all(name in note for name, _ in examples)
    assert "no draft trees in" in skipped[0] and "no continuous-token records in" in skipped[2]
    assert not any(path.stem.endswith(("depth-map", "tree-shapes", "token-acceptance")) for path in made.files)


@pytest.mark.parametrize("style", ["paper", "dark"])
def test_window_draws_the_apps_grid_state_and_ratios(style):
    """Same numbers and colours as the app: cells per colour as grid_state says, one bar per draft."""
    _, trace = _example("scd-mc")
    setting = Setting(STYLES[style], 3.3, 50, None)
    fig = window(trace, setting)
    grid_ax, _, bars_ax = fig.axes
    palette = colors(STYLES[style].dark)
    state = grid_state(trace, 50).state
    drawn = {
        to_hex(collection.get_facecolor()[0]).upper(): len(collection.get_paths())
        for collection in grid_ax.collections[:-1]  # the last one outlines the cells committed now
    }
    assert drawn == {palette[name].upper(): int((state == name).sum()) for name in STATES if (state == name).any()}
    it = trace.iterations[50]
    bars, strip = bars_ax.patches[: len(it.drafts)], bars_ax.patches[len(it.drafts) :]
    assert [bar.get_height() for bar in bars] == pytest.approx(it.ratio)
    expected = [palette[name].upper() for name in it.outcome()]
    for patches in (bars, strip):
        assert [to_hex(bar.get_facecolor()).upper() for bar in patches] == expected


def test_acceptance_map_draws_the_apps_maps():
    _, trace = _example("sjd")
    fig = acceptance_map(trace, Setting(STYLES["paper"], 3.3, None, None))
    maps = acceptance_maps(trace)
    for ax, kind in zip(fig.axes[:3], ("iteration", "run_length", "redraws"), strict=True):
        assert ax.collections[0].get_array().reshape(16, 16).tolist() == maps[kind].tolist()


def test_width_style_and_iteration(tmp_path):
    name, trace = _example("sjd")
    made = write_figures([(name, trace)], tmp_path, ["svg"], "slides", width_in=5.0, iteration=7)
    window = tmp_path / "sjd-window-7.svg"
    assert window in made.files
    assert _svg_size(window)[0] == pytest.approx(360.0)
    assert "sjd, iteration 7/87" in window.read_text()  # slides have titles
    paper = write_figures([(name, trace)], tmp_path / "paper", ["svg"], "paper", iteration=7)
    assert paper.files[1].name == "sjd-window-7.svg"
    assert "iteration 7/87" not in paper.files[1].read_text()  # a paper's caption replaces the title


def test_image_panel_is_the_only_raster(tmp_path):
    name, trace = _example("sjd")
    asked = []

    def decode(run: Trace, tokens: list[int]) -> Image.Image:
        asked.append(tokens)
        return Image.new("RGB", (48, 48), "#C03020")

    made = write_figures([(name, trace)], tmp_path, ["pdf", "svg"], iteration=20, decode=decode)
    assert asked == [tokens_through(trace, 20)]
    for path in made.files:
        data = path.read_bytes()
        has_raster = b"/Subtype /Image" in data or b"<image" in data
        assert has_raster == (path.stem == "sjd-window-20"), path.name


def test_output_is_reproducible(tmp_path):
    traces = [_example("sjd")]
    first = write_figures(traces, tmp_path / "a", FORMATS)
    second = write_figures(traces, tmp_path / "b", FORMATS)
    for one, two in zip(first.files, second.files, strict=True):
        assert one.read_bytes() == two.read_bytes(), one.name


@pytest.mark.parametrize("dark", [False, True])
def test_states_are_distinct_in_grey(dark):
    """Two cell states whose colours print as nearly the same grey differ in hatch or outline."""
    for one, two in itertools.combinations(STATES, 2):
        apart = abs(state_lightness(one, dark) - state_lightness(two, dark))
        assert apart >= GREY_STEP or grey_mark(one) != grey_mark(two), (one, two, round(apart, 1))


def test_palette_alone_is_not_enough_in_grey():
    """Why the hatches exist: some fate colours are closer than GREY_STEP in lightness."""
    close = [
        (one, two)
        for one, two in itertools.combinations(STATES, 2)
        if abs(state_lightness(one) - state_lightness(two)) < GREY_STEP
    ]
    assert ("redrawn", "new") in close or ("new", "redrawn") in close


def _rerun(trace: Trace, **changes) -> Trace:
    return trace.model_copy(update=changes)


def test_comparison_pairs_each_run_with_its_ar(examples):
    (_, ar), (_, sjd), (_, scd) = examples
    runs = [sjd, ar, scd, _rerun(ar, seed=1, seconds=2 * ar.seconds), _rerun(sjd, seed=1)]
    rows, notes = comparison_rows(runs)
    assert [row.label for row in rows] == ["ar", "sjd", "scd-mc"] and notes == []
    by_label = {row.label: row for row in rows}
    assert by_label["sjd"].latency_speedup == pytest.approx([ar.seconds / sjd.seconds, 2 * ar.seconds / sjd.seconds])
    assert by_label["sjd"].step_compression == pytest.approx([256 / sjd.nfe] * 2)
    assert by_label["ar"].latency_speedup == [1.0, 1.0]


def test_comparison_without_ar_shows_nfe_and_step_compression_only(examples, tmp_path):
    (_, ar), (_, sjd), _ = examples
    rows, notes = comparison_rows([sjd, _rerun(sjd, method="jacobi", lossless=False)])
    assert all(not row.latency_speedup for row in rows)
    assert notes == ["no AR trace given: the comparison shows NFE and step compression only"]
    rows, notes = comparison_rows([sjd, ar, _rerun(sjd, seed=3)])
    assert notes == ["no AR trace for prompt 'red apple', seed 3: latency of sjd against AR not shown"]
    made = write_figures([("sjd", sjd), ("jacobi", _rerun(sjd, method="jacobi", lossless=False))], tmp_path, ["svg"])
    comparison = (tmp_path / "comparison.svg").read_text()
    assert "latency" not in comparison and "jacobi (lossy)" in comparison
    assert "no AR trace given" in " ".join(made.notes)


def test_ratios_below_one_read_as_slower():
    assert ratio_text(2.914) == "2.91x"
    assert ratio_text(1.0) == "1.00x"
    assert ratio_text(0.8) == "1.25x slower"


def test_file_stems_tell_traces_apart(examples):
    (_, ar), (_, sjd), _ = examples
    assert file_stems([ar, sjd]) == ["ar", "sjd"]
    assert file_stems([sjd, _rerun(sjd, seed=2)]) == ["sjd-seed0", "sjd-seed2"]
    assert file_stems([sjd, _rerun(sjd, prompt="Blue Car!")]) == ["sjd-red-apple", "sjd-blue-car"]
    assert file_stems([sjd, sjd]) == ["sjd", "sjd-2"]


HOSTILE_NAMES = ["../../../../tmp/x/PWNED", "/tmp/x/PWNED", "a\x00b", "a/" * 40, "..", "", "$\\frac{$", "é" * 300]


def test_names_from_a_trace_never_leave_the_output_folder(examples, tmp_path):
    """A trace's method, model and prompt name the files; made into slugs, they cannot name a path. (A
    loaded trace cannot carry such names at all: these are built around the loader's checks.)"""
    (_, ar), (_, sjd), _ = examples
    hostile = [
        sjd.model_copy(update={"method": n, "model": n, "prompt": n, "seed": k}) for k, n in enumerate(HOSTILE_NAMES)
    ]
    stems = file_stems(hostile)
    assert all(re.fullmatch(r"[a-z0-9-]+", stem) and len(stem) < 4 * SLUG_CHARS for stem in stems), stems
    assert stems[4:6] == ["method-model-prompt-seed4", "method-model-prompt-seed5"]  # '..' and '': the fallbacks
    out = tmp_path / "out"
    write_figures([("traversing", hostile[0]), ("absolute", hostile[1]), ("ar", ar)], out, ["png"])
    written = {path.relative_to(tmp_path) for path in tmp_path.rglob("*")}
    assert all(path.parts[0] == "out" and len(path.parts) <= 2 for path in written), sorted(written)
    assert (out / "tmp-x-pwned-tmp-x-pwned-tmp-x-pwned-seed0-acceptance-map.png").is_file()


def test_a_link_planted_in_the_output_folder_is_not_followed(examples, tmp_path):
    (_, sjd) = examples[1]
    out, outside = tmp_path / "out", tmp_path / "outside.png"
    out.mkdir()
    (out / "sjd-acceptance-map.png").symlink_to(outside)
    with pytest.raises(FigureOptionError, match="outside"):
        write_figures([("sjd", sjd)], out, ["png"])
    assert not outside.exists()


def test_text_from_a_trace_is_drawn_as_written(examples, tmp_path):
    """A '$' in a trace's text (a prompt, a string parameter in a comparison label) is not TeX to parse."""
    (_, sjd) = examples[1]
    tex = sjd.model_copy(update={"params": {**sjd.params, "init": "$\\frac{$"}, "prompt": "a $\\frac{ b$"})
    write_figures([("sjd", sjd), ("tex", tex)], tmp_path, ["svg"])
    assert "frac" in (tmp_path / "comparison.svg").read_text()


def test_cli_writes_the_figures_of_shipped_traces(tmp_path, capsys, examples):
    paths = [name for name, _ in examples]
    assert main(["figures", *paths, "--out", str(tmp_path / "out"), "--format", "pdf,svg"]) == 0
    captured = capsys.readouterr()
    printed = captured.out.split()
    assert len(printed) == len(_expected_names(examples)) * 2
    assert all(Path(path).is_file() for path in printed)
    lacking = [kind for kind in FIGURES if kind.needs and not any(kind.needs.present(t) for _, t in examples)]
    assert captured.err.count("note: ") == len(lacking) and "Traceback" not in captured.err


def test_cli_image_panel_decodes_with_the_traces_model(tmp_path, capsys):
    name, _ = _example("sjd")
    assert main(["figures", name, "--out", str(tmp_path), "--iteration", "30", "--image"]) == 0
    assert b"/Subtype /Image" in (tmp_path / "sjd-window-30.pdf").read_bytes()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--format", "jpg"], "unknown format jpg; choose from pdf, svg, png"),
        (["--format", ","], "unknown format ','"),
        (["--style", "poster"], "unknown style 'poster'; choose from paper, slides, dark"),
        (["--width-in", "0.5"], "width 0.5 in is out of range; give 1.5 to 16.0 inches"),
        (["--width-in", "40"], "out of range"),
        (["--iteration", "88"], "iteration 88 is out of range for"),
        (["--iteration", "-1"], "iteration -1 is out of range for"),
    ],
)
def test_bad_options_are_refused_clearly(tmp_path, capsys, arguments, message):
    name, _ = _example("sjd")
    out = tmp_path / "out"
    assert main(["figures", name, "--out", str(out), *arguments]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
    assert not out.exists()


def test_bad_traces_are_refused_clearly(tmp_path, capsys):
    out = tmp_path / "out"
    broken = tmp_path / "broken.json"
    broken.write_text('{"version": 2, "model": "tiny"')
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"version": 2}')
    for path, message in (
        (tmp_path / "missing.json", "cannot read trace"),
        (broken, "not valid JSON"),
        (wrong, f"{wrong}: invalid trace"),
    ):
        assert main(["figures", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and str(path) in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_unwritable_output_folder_is_refused_before_drawing(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    name, _ = _example("sjd")
    assert main(["figures", name, "--out", str(blocker / "sub")]) == 2
    assert "cannot write to" in capsys.readouterr().err


def test_app_export_offers_the_same_figures(tmp_path):
    from specviz.ui.replay import figure_archive

    (_, ar), (_, sjd) = _example("ar"), _example("sjd")
    archive = figure_archive({"trace": sjd, "ar": ar}, 12, tmp_path, None, dark=True)
    figures = ["sjd-acceptance-map", "ar-acceptance-map", "sjd-window-12", "ar-window-12"]
    figures += ["sjd-iterations", "ar-iterations", "comparison"]
    with zipfile.ZipFile(archive) as bundle:
        assert sorted(bundle.namelist()) == sorted(f"{name}.{kind}" for name in figures for kind in FORMATS)
        comparison = bundle.read("comparison.svg").decode()
    assert "methods against AR" in comparison and "#111111" in comparison  # dark mode: the dark style


def test_the_rejected_label_sits_clear_of_the_bars_after_the_rejection():
    """SJD++ re-checks the drafts after a rejection, so they have bars: the label goes where bars end below
    it, the nearest such place (it once covered two tall bars); with no such place it keeps its old spot."""
    from specviz.viz.figures import BAR_HALF_WIDTH, LABEL_HEIGHT, _label_place

    ratios = [1.0] * 9 + [0.99, 0.3, 0.4, 0.2, 0.0, 0.0, 1.0]  # rejected at 9; low re-checked bars after it
    place = _label_place(9, ratios, 16, reach=0.6)
    covered = [k for k in range(16) if abs(place - k) < 0.6 + BAR_HALF_WIDTH]
    assert abs(place - 9) >= 2 and covered and all(ratios[k] < LABEL_HEIGHT for k in covered), (place, covered)
    assert _label_place(0, [0.0] * 16, 16, reach=0.6) == 2  # SJD: nothing after the rejection, the label near it
    assert _label_place(3, [1.0] * 16, 16, reach=0.6) == 5.5  # nowhere clear: beside it, away from the nearer end
    assert _label_place(13, [1.0] * 16, 16, reach=0.6) == 10.5


def test_a_ratio_label_just_left_of_the_ar_line_starts_right_of_it(examples):
    """'1.03x slower' began at its bar's end, 0.97, and the dashed AR = 1x line ran into its first digit: a
    label that close starts right of the line (as AR's own '1.00x' does), and every ratio label is boxed in
    the page's colour."""
    from specviz.viz.publication.drawings import comparison

    (_, ar), (_, sjd), _ = examples
    slow = sjd.model_copy(update={"seconds": ar.seconds / 0.97})
    fig = comparison([ar, slow], Setting(STYLES["paper"], 3.3, None, None))
    latency = fig.axes[2]
    labels = {text.get_text(): text for text in latency.texts}
    assert labels["1.03x slower"].xy[0] >= 1.0 and labels["1.00x"].xy[0] >= 1.0
    assert all(text.get_bbox_patch() is not None for text in latency.texts)
