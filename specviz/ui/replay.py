"""The Replay and export tab: load a saved trace (JSON only) and restore its settings; download the
run's trace, a slide-ready animation beside its AR run, a frame and the publication figures."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from gradio.events import Dependency
from PIL import Image

from specviz import metrics, viz
from specviz.core.catalogue import is_baseline
from specviz.core.settings import SettingsError
from specviz.models.protocol import ImageModel, decode_in_order
from specviz.trace import Trace, TraceError
from specviz.ui.compute import VIEWER_WORK, on_compute_thread
from specviz.ui.controls import Controls, restored_controls
from specviz.ui.errors import user_errors
from specviz.ui.handover import LOADS, opened_at
from specviz.ui.loading import decoder_for
from specviz.ui.outputs import Outputs
from specviz.viz.publication import FORMATS, write_figures

log = logging.getLogger("specviz.ui")

EXPORT_ROOT = Path(tempfile.gettempdir()) / "specviz-exports"
EXPORT_MAX_AGE_SECONDS = 3600
# a refused upload's toast: the status line under the upload keeps the reason, while the toast lies over the
# presets' row and the projector switch at its end (Gradio's 10 s hid them in a lecture)
UPLOAD_WARNING_SECONDS = 3


def export_folder() -> Path:
    """A new folder for one export; folders older than an hour are removed first, so a long-running
    server does not fill its disk."""
    EXPORT_ROOT.mkdir(exist_ok=True)
    cutoff = time.time() - EXPORT_MAX_AGE_SECONDS
    for old in EXPORT_ROOT.iterdir():
        if old.is_dir() and old.stat().st_mtime < cutoff:
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix="export-", dir=EXPORT_ROOT))


def figure_archive(runs: dict, j: int, folder: Path, decoder: ImageModel | None, dark: bool) -> Path:
    """figures.zip: the publication figures of the run on screen and its AR baseline at iteration j,
    every format, as `python -m specviz figures` writes them (AR has an iteration for every token, so j
    fits it too)."""
    shown = [("the run on screen", runs["trace"])] + ([("its AR baseline", runs["ar"])] if runs.get("ar") else [])
    decode = (
        (lambda trace, tokens: on_compute_thread(decode_in_order, decoder, tokens, trace.geometry.order))
        if decoder
        else None
    )
    figures = folder / "figures"
    figures.mkdir()
    made = write_figures(shown, figures, FORMATS, "dark" if dark else "paper", iteration=j, decode=decode)
    for note in made.notes:
        log.info("figures: %s", note)
    archive = folder / "figures.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in made.files:
            bundle.write(path, path.name)
    return archive


def replayed(traces: list[Trace]) -> dict:
    """The runs an upload holds: one trace, or a method's trace with the AR run it raced (same model,
    prompt, seed and sampling), in either order."""
    if len(traces) > 2:
        raise TraceError(f"upload one trace, or a trace and its ar-trace.json; got {len(traces)} files")
    if len(traces) == 1:
        return {"trace": traces[0]}
    ar = [t for t in traces if is_baseline(t.method)]
    if not ar:
        raise TraceError("of two traces one must be the AR run (ar-trace.json) that the other raced")
    trace = next((t for t in traces if t is not ar[-1]), ar[0])
    baseline = ar[-1] if trace is not ar[-1] else ar[0]
    same = ("model", "prompt", "seed", "sampling")
    if any(getattr(trace, key) != getattr(baseline, key) for key in same):
        raise TraceError(f"the AR trace is not of the same model, prompt, seed and sampling as {trace.method}'s")
    return {"trace": trace, "ar": baseline}


@dataclass
class ReplayTab:
    upload: gr.File
    status: gr.Markdown
    export_button: gr.Button
    beside_ar: gr.Checkbox
    downloads: gr.File


def build() -> ReplayTab:
    with gr.Tab("Replay and export", id="replay"):
        gr.Markdown(
            "Upload a saved `trace.json` (for example one made on a GPU) to inspect it here without running a "
            "model. Download the current run's trace (after a race, with its AR run: `trace.json` and "
            "`ar-trace.json`), a slide-sized animation (GIF and MP4, beside its AR run after a race), a frame, or "
            "`figures.zip`: the publication figures of the run (and its AR baseline) at this iteration, as PDF, "
            "SVG and PNG, in paper style (dark style in dark mode), the same files as `python -m specviz "
            "figures`; each plot also has a camera button that saves it as PNG."
        )
        upload = gr.File(
            label="trace.json, and ar-trace.json to see the race against AR again",
            file_types=[".json"],
            file_count="multiple",
            type="filepath",
            elem_id="trace-upload",
        )
        status = gr.Markdown()
        with gr.Row():
            export_button = gr.Button("Prepare downloads")
            beside_ar = gr.Checkbox(
                True,
                label="Animation beside AR",
                info="after a race: both runs, frame by frame after the same number of model passes",
            )
        downloads = gr.File(label="Downloads", file_count="multiple", interactive=False)
    return ReplayTab(upload, status, export_button, beside_ar, downloads)


def wire(tab: ReplayTab, controls: Controls, runs: gr.State, iteration: gr.Slider, loaded: gr.Number) -> Dependency:
    """The upload and the export; returns the upload's event, after which the race tab shows the runs."""

    outputs = Outputs(
        {"runs": runs, "status": tab.status, "iteration": iteration, "loaded": loaded, "downloads": tab.downloads},
        controls.restored_outputs(),
    )

    @user_errors
    @outputs.set_by
    def replay(paths: list[str] | None, big: bool, night: bool) -> dict:
        """Load a trace (and the AR run it raced); set the controls to its settings and open Inspect at an
        instructive iteration."""
        if not paths:
            return {}
        try:
            if len(paths) > 2:  # counted before any is read (CheckedBlocks refuses more already)
                raise TraceError(f"upload one trace, or a trace and its ar-trace.json; got {len(paths)} files")
            state = replayed([Trace.load(path) for path in paths])
        except TraceError as error:  # said on the status line; the run on screen and the controls stay
            log.warning("refused upload: %s", error)
            gr.Warning(str(error), duration=UPLOAD_WARNING_SECONDS)
            return {"status": f"**Not loaded**: {error}"}
        trace = state["trace"]
        note = f"Loaded **{trace.method}** on **{trace.model}**: "
        note += f"{len(trace.iterations)} iterations, NFE {trace.nfe}"
        note += f", with the AR run it raced ({state['ar'].nfe} passes). " if "ar" in state else ". "
        restored, unchanged = restored_controls(trace)
        note += "The controls now show its settings" + (f" ({'; '.join(unchanged)})." if unchanged else ".")
        if decoder_for(trace) is None:
            note += f" Model {trace.model} is not loaded here, so images are not shown; the token views are."
        handed = {"runs": state, "iteration": opened_at(trace), "loaded": next(LOADS), "downloads": None}
        return {**handed, "status": note, **restored}

    # any other refusal marks the status line, not every control the upload would have set; Inspect follows `loaded`
    inputs = [tab.upload, controls.large, controls.dark]
    uploaded = tab.upload.upload(replay, inputs, outputs.components, show_progress_on=tab.status)

    @user_errors
    @VIEWER_WORK.drawing
    def export(state: dict, j: float, night: bool, with_ar: bool = True):
        if not state:
            raise SettingsError("run a method or upload a trace first")
        trace: Trace = state["trace"]
        ar: Trace | None = state.get("ar") if with_ar else None  # a race has one; an uploaded trace not
        folder = export_folder()
        trace.save(folder / "trace.json")
        files = [folder / "trace.json"]
        if state.get("ar") is not None:
            state["ar"].save(folder / "ar-trace.json")
            files.append(folder / "ar-trace.json")
        decoder = decoder_for(trace)

        def image_at(k: int) -> Image.Image | None:
            tokens = metrics.tokens_through(trace, k)
            return on_compute_thread(decode_in_order, decoder, tokens, trace.geometry.order) if decoder else None

        def ar_image_at(k: int) -> Image.Image | None:
            tokens = metrics.tokens_through(ar, k)
            return on_compute_thread(decode_in_order, decoder, tokens, ar.geometry.order) if decoder else None

        def animate(paths: list[Path]) -> list[Path]:
            return viz.write_animation(trace, image_at, paths, dark=night, ar=ar, ar_image_at=ar_image_at)

        try:
            files += animate([folder / "animation.gif", folder / "animation.mp4"])
        except RuntimeError as error:  # no imageio-ffmpeg: the GIF alone
            log.warning("no MP4: %s", error)
            files += animate([folder / "animation.gif"])
        k = max(0, min(int(j), len(trace.iterations) - 1))
        viz.frame(trace, k, image_at(k), scale=viz.export_scale(trace), dark=night).save(folder / f"iteration-{k}.png")
        files.append(folder / f"iteration-{k}.png")
        files.append(figure_archive(state, k, folder, decoder, night))
        return [str(f) for f in files]

    tab.export_button.click(export, [runs, iteration, controls.dark, tab.beside_ar], tab.downloads)
    return uploaded
