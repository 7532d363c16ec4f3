"""Outputs bounded by their size, not by what a file claims (issue 55): figures and exports of tall grids,
strict numbers in traces, the image panel of a trace its model cannot decode, the prompt-vectors file
(written and read), and sample counts.

Tall-grid traces are generated here (an SJD-like run: a first token, then windows of two drafts, the
first accepted and the second rejected and resampled), not committed."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from specviz import cli
from specviz.core.errors import ExportError
from specviz.models.tiny import text
from specviz.trace import TRACE_VERSION, Trace, TraceError
from specviz.viz import frames
from specviz.viz.publication import STYLES, write_figures
from specviz.viz.publication.drawings import window
from specviz.viz.publication.files import MAX_PNG_PIXELS
from specviz.viz.publication.style import MAX_GRID_HEIGHT, Setting

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).parents[1] / "specviz" / "data" / "examples"
MAX_FIGURES_RSS = 600 * 1024 * 1024  # bytes; 256 x 1 took 3.1 GB and 1024 x 1 7.6 GB before the bound


def tall_trace(rows: int, cols: int) -> dict:
    """A valid SJD-like trace of a rows x cols grid, as JSON data."""
    n = rows * cols
    tokens = [(7 * i) % 1000 for i in range(n)]
    iterations = [{"kind": "token", "start": 0, "committed": [tokens[0]], "forward_ms": 1.0}]
    position = 1
    while position < n:
        if position + 1 < n:
            iterations.append(
                {
                    "kind": "window", "start": position, "committed": tokens[position : position + 2], "accepted": 1,
                    "forward_ms": 1.0, "drafts": [tokens[position], 3], "p_old": [0.5, 0.5], "p_new": [0.6, 0.1],
                    "ratio": [1.0, 0.2], "uniform": [0.1, 0.9], "tv": [0.2, 0.3], "fate": ["accepted", "rejected"],
                    "rejected_at": 1, "resampled": tokens[position + 1], "new_init": ["random"], "new_source": [-1],
                }
            )  # fmt: skip
            position += 2
        else:
            iterations.append({"kind": "token", "start": position, "committed": [tokens[position]], "forward_ms": 1.0})
            position += 1
    return {
        "version": TRACE_VERSION, "model": "tiny", "method": "sjd", "lossless": True, "prompt": f"{rows}x{cols}",
        "seed": 0,
        "sampling": {"temperature": 1.0, "top_k": None, "top_p": 1.0, "guidance_scale": 1.5}, "params": {},
        "geometry": {"rows": rows, "cols": cols, "vocab_size": 1024, "layout": [-1] * n},
        "tokens": tokens, "nfe": len(iterations), "seconds": 1.0, "iterations": iterations,
    }  # fmt: skip


def _write(folder: Path, data: dict, name: str) -> Path:
    path = folder / name
    path.write_text(json.dumps(data))
    return path


def _one_clean_line(captured) -> str:
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in captured.err, captured.err
    return lines[0]


# A. figures and exports of tall grids


# the command in a process of its own that reports its own peak (VmHWM, after its exec): wait4's ru_maxrss
# carries the parent's peak across a vfork and exec, and a test worker that holds the launched app is gigabytes
PEAK_OF_FIGURES = (
    "import sys, pathlib; from specviz import cli; code = cli.main(sys.argv[1:]); "
    "peak = next(l for l in pathlib.Path('/proc/self/status').read_text().splitlines() if l.startswith('VmHWM')); "
    "print('peak-kb', peak.split()[1]); sys.exit(code)"
)


def test_tall_grids_draw_in_bounded_memory_and_size(tmp_path):
    """256 x 1 and 1024 x 1 through `figures` as a real process, its own peak memory as it reports it."""
    traces = [_write(tmp_path, tall_trace(rows, 1), f"tall-{rows}.json") for rows in (256, 1024)]
    out = tmp_path / "figures"
    arguments = ["figures", *map(str, traces), "--out", str(out), "--format", "png"]
    command = [sys.executable, "-c", PEAK_OF_FIGURES, *arguments]
    started = time.perf_counter()
    process = subprocess.run(command, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - started
    assert process.returncode == 0, process.stdout + process.stderr
    peak = int(process.stdout.rsplit("peak-kb", 1)[1].split()[0]) * 1024
    print(f"figures of 256x1 and 1024x1: peak {peak / 2**20:.0f} MiB, {seconds:.1f} s")
    assert peak < MAX_FIGURES_RSS, f"peak memory {peak / 2**20:.0f} MiB"
    assert seconds < 60
    style = STYLES["paper"]
    tallest = (MAX_GRID_HEIGHT + 1.2) * style.width_in * style.png_dpi  # the grid, then bars and legend
    pictures = sorted(out.glob("*.png"))
    assert len(pictures) == 7  # two acceptance maps, windows and iteration strips, one comparison
    for path in pictures:
        with Image.open(path) as picture:
            assert picture.height < tallest and picture.width * picture.height <= MAX_PNG_PIXELS, path.name


def test_a_grid_too_fine_to_read_is_skipped_with_its_limit(tmp_path):
    """4096 x 1 at the paper's 3.3 in: cells of 0.06 pt; the grid figures are skipped, the others drawn."""
    trace = Trace.model_validate(tall_trace(4096, 1))
    made = write_figures([("tall.json", trace)], tmp_path, ["png"], "paper")
    assert sorted(path.name for path in made.files) == ["comparison.png", "sjd-iterations.png"]
    skipped = [note for note in made.notes if "grid would have cells" in note]
    assert len(skipped) == 2 and all("at most 1425 rows" in note and "--width-in" in note for note in skipped)
    assert skipped[0].startswith("acceptance map of tall.json skipped: a 4096x1 grid")


def test_the_image_panel_of_a_tall_grid_is_bounded():
    """The image panel is enlarged by its longest side: a 1024 x 1 grid's 8 x 8192 image stays as it is,
    where it was enlarged 64 times (512 x 524,288 pixels, the 19 GB of `--style slides --image`)."""
    trace = Trace.model_validate(tall_trace(1024, 1))
    sizes = []

    def decode(trace, tokens):
        sizes.append(len(tokens))
        return Image.new("RGB", (8, 8192), "red")

    style = STYLES["slides"]
    fig = window(trace, Setting(style, style.width_in, None, decode))
    width_in, height_in = fig.get_size_inches()
    assert sizes and width_in == style.width_in and height_in < (MAX_GRID_HEIGHT + 1.5) * style.width_in
    (image,) = [artist for ax in fig.axes for artist in ax.get_images()]
    assert image.get_array().shape[:2] == (8192, 8)


def test_frames_of_tall_grids_fit_the_frame_limit(tmp_path, monkeypatch):
    tall = Trace.model_validate(tall_trace(256, 1))
    scale = frames.export_scale(tall)
    assert scale >= 1
    picture = frames.frame(tall, len(tall.iterations) - 1, None, scale=scale)
    assert max(picture.size) <= frames.MAX_FRAME_WIDTH
    with pytest.raises(ExportError, match="2048 on a side"):  # refused before drawing, not a 16,000-pixel frame
        frames.frame(Trace.model_validate(tall_trace(1024, 1)), 3, None, scale=16)
    with pytest.raises(ExportError, match="too tall to animate"):
        frames.export_scale(Trace.model_validate(tall_trace(4096, 1)))
    monkeypatch.setattr(frames, "MAX_FRAMES", 4)
    (gif,) = frames.write_animation(tall, lambda j: None, [tmp_path / "tall.gif"])
    with Image.open(gif) as animation:
        assert max(animation.size) <= frames.MAX_FRAME_WIDTH


# B. figures --image of a trace its model cannot decode


def test_figures_image_refuses_a_trace_its_model_cannot_decode(tmp_path, capsys):
    trace = _write(tmp_path, tall_trace(256, 1), "tall.json")  # model tiny, whose grid is 16 x 16
    out = tmp_path / "figures"
    assert cli.main(["figures", str(trace), "--out", str(out), "--image"]) == 2
    line = _one_clean_line(capsys.readouterr())
    assert "--image cannot decode this trace: its grid is 256x1 and model tiny's 16x16" in line
    assert "leave out --image" in line and not out.exists()


# C. strict numbers in traces


def _with(data: dict, change) -> str:
    copy = json.loads(json.dumps(data))
    change(copy)
    return json.dumps(copy)


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "inf", "1e999", "NaN", "nan", "0.5"])
def test_numbers_written_as_text_are_refused(value):
    sjd = json.loads((EXAMPLES / "red-apple-sjd.json").read_text())
    window_at = next(index for index, it in enumerate(sjd["iterations"]) if it["kind"] == "window")
    cspd = json.loads((DATA / "trace-v2-cspd.json").read_text())
    step = next(index for index, it in enumerate(cspd["iterations"]) if (it.get("continuous") or {}).get("fate"))

    def set_draft_path(data):
        data["iterations"][step]["continuous"]["draft_path"][0][0] = [value, 0.0]

    changes = {
        "vectors": (cspd, lambda data: data["vectors"][0].__setitem__(0, value)),
        "log_ratio": (cspd, lambda data: data["iterations"][step]["continuous"]["log_ratio"].__setitem__(0, value)),
        "draft_path": (cspd, set_draft_path),
        "p_old": (sjd, lambda data: data["iterations"][window_at]["p_old"].__setitem__(0, value)),
        "forward_ms": (sjd, lambda data: data["iterations"][0].__setitem__("forward_ms", value)),
        "seconds": (sjd, lambda data: data.__setitem__("seconds", value)),
        "temperature": (sjd, lambda data: data["sampling"].__setitem__("temperature", value)),
    }
    for field, (data, change) in changes.items():
        with pytest.raises(TraceError, match=f"'{value}' is text, not a number") as refused:
            Trace.from_json(_with(data, change))
        assert "\n" not in str(refused.value), field


def test_non_finite_numbers_and_loose_counts_are_refused():
    data = json.loads((DATA / "trace-v2-cspd.json").read_text())
    data["vectors"][0][0] = 1.2345678
    with pytest.raises(TraceError, match="'1e999' is beyond the numbers a trace may hold"):
        Trace.from_json(json.dumps(data).replace("1.2345678", "1e999"))
    with pytest.raises(TraceError, match="not a number a trace may hold"):
        Trace.from_json(json.dumps(data).replace("1.2345678", "-Infinity"))
    sjd = json.loads((EXAMPLES / "red-apple-sjd.json").read_text())
    for count in (2.0, True, "2"):
        with pytest.raises(TraceError, match="nfe"):
            Trace.from_json(_with(sjd, lambda d, count=count: d.__setitem__("nfe", count)))
    assert Trace.from_json(_with(sjd, lambda d: d.__setitem__("seconds", 2))).seconds == 2.0  # a whole number is one


# D. prompt-vectors --out with folders that do not exist yet


def test_prompt_vectors_creates_missing_folders(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "c" / "v.safetensors"
    assert cli.main(["prompt-vectors", "--out", str(out), "--limit", "1"]) == 0
    assert out.is_file() and "wrote the vectors of 1 prompts" in capsys.readouterr().out
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert cli.main(["prompt-vectors", "--out", str(blocked / "sub" / "v.safetensors"), "--limit", "1"]) == 2
    _one_clean_line(capsys.readouterr())


# E. SPECVIZ_PROMPT_VECTORS


@pytest.fixture
def stored_vectors(monkeypatch):
    """Sets SPECVIZ_PROMPT_VECTORS for one test; the process's encoder is chosen afresh before and after."""
    text.shared_text_encoder.cache_clear()

    def use(path: Path) -> None:
        monkeypatch.setenv(text.VECTORS_ENV_VAR, str(path))

    yield use
    monkeypatch.delenv(text.VECTORS_ENV_VAR, raising=False)
    text.shared_text_encoder.cache_clear()


def _vectors_file(path: Path, tensors: dict, prompts: object = ("red apple",)) -> Path:
    listed = prompts if isinstance(prompts, str) else list(prompts or ())  # a text: not a list of prompts
    metadata = None if prompts is None else {"prompts": json.dumps(listed)}
    save_file(tensors, str(path), metadata=metadata)
    return path


def test_stored_vectors_are_checked_when_read(tmp_path, stored_vectors):
    good = torch.nn.functional.normalize(torch.randn(1, text.TEXT_DIM), dim=-1)
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00\xffnot safetensors at all")
    huge = tmp_path / "huge.safetensors"
    with huge.open("wb") as file:
        file.truncate(text.MAX_VECTORS_BYTES + 1)
    cases = {
        "missing": (tmp_path / "nowhere.safetensors", "cannot read SPECVIZ_PROMPT_VECTORS file .*No such file"),
        "folder": (tmp_path, "is not a regular file"),
        "fifo": (fifo, "is not a regular file"),  # opened, it would block for ever
        "huge": (huge, "larger than"),
        "garbage": (garbage, "is not a safetensors file"),
        "no prompts": (_vectors_file(tmp_path / "p.safetensors", {"vectors": good}, None), "lists no prompts"),
        "prompts not a list": (
            _vectors_file(tmp_path / "q.safetensors", {"vectors": good}, "red apple"),
            "lists no prompts",
        ),
        "wrong key": (_vectors_file(tmp_path / "k.safetensors", {"embeddings": good}), "it needs one, named 'vectors'"),
        "extra key": (
            _vectors_file(tmp_path / "e.safetensors", {"vectors": good, "x": good.clone()}),
            "it needs one, named 'vectors'",
        ),
        "wrong width": (_vectors_file(tmp_path / "w.safetensors", {"vectors": good[:, :10]}), r"shape \(1, 10\)"),
        "wrong count": (
            _vectors_file(tmp_path / "c.safetensors", {"vectors": good}, ("red apple", "a blue car")),
            r"its 2 prompts need floats of shape \(2, 384\)",
        ),
        "integers": (
            _vectors_file(tmp_path / "i.safetensors", {"vectors": torch.ones(1, text.TEXT_DIM, dtype=torch.int32)}),
            "torch.int32",
        ),
        "nan": (_vectors_file(tmp_path / "n.safetensors", {"vectors": good * float("nan")}), "NaN or infinite"),
    }
    for what, (path, message) in cases.items():
        stored_vectors(path)
        text.shared_text_encoder.cache_clear()
        with pytest.raises(text.PromptVectorsError, match=message) as refused:
            text.shared_text_encoder()
        assert str(refused.value).count("\n") == 0 and text.VECTORS_ENV_VAR in str(refused.value), what
    stored_vectors(_vectors_file(tmp_path / "good.safetensors", {"vectors": good}))
    text.shared_text_encoder.cache_clear()
    torch.testing.assert_close(text.shared_text_encoder()(["red apple"]), good)
    with pytest.raises(text.PromptVectorsError, match="no stored vector for the prompt 'rocket' in SPECVIZ_PROMPT"):
        text.shared_text_encoder()(["rocket"])


def test_a_bad_vectors_file_is_one_line_from_the_command_line(tmp_path, stored_vectors, capsys):
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"junk")
    stored_vectors(garbage)
    out = tmp_path / "out"
    assert cli.main(["run", "--prompt", "red apple", "--out", str(out)]) == 2
    line = _one_clean_line(capsys.readouterr())
    assert f"SPECVIZ_PROMPT_VECTORS file {garbage} is not a safetensors file" in line and not out.exists()


# F. sample counts


@pytest.mark.parametrize(
    "method, samples, limit",
    [
        ("sjd", cli.MAX_LOSSLESS_SAMPLES + 1, cli.MAX_LOSSLESS_SAMPLES),
        ("ar", 10_000_000, cli.MAX_LOSSLESS_SAMPLES),
        ("cspd", cli.MAX_CONTINUOUS_SAMPLES + 1, cli.MAX_CONTINUOUS_SAMPLES),
    ],
)
def test_sample_counts_above_the_cap_are_refused(capsys, method, samples, limit):
    started = time.perf_counter()
    assert cli.main(["check-lossless", "--method", method, "--samples", str(samples)]) == 2
    line = _one_clean_line(capsys.readouterr())
    assert f"to {limit}" in line and "minutes" in line and time.perf_counter() - started < 5
