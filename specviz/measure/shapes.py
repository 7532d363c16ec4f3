"""The released models' shapes with random weights: what a pass costs at 7B, with no weights to download.

`specviz/data/release_shapes.json` holds each release's decoder configuration, image grid and the
figures the method papers report on it. `ShapeModel` builds that decoder from the family's own
transformers class (LlamaGen: specviz's own GPT, through its adapter) with random weights in the
device's dtype, behind the session code the family's adapter uses, plus a random EAGLE head of the
target's width so that the tree methods run too, on the plain path or, as the adapters build it, on the
fast path (`specviz.models.fast.fixed_passes`: a static cache, fixed-width passes, CUDA graphs). The
weights decide which drafts are accepted, not what a pass costs, so these models measure every cost but
not acceptance, on either path:

- AR's time per token beside the device's floor (reading the decoder's bf16 weights once, where the
  device's memory bandwidth is known), and a pass over 1 .. 65 tokens against a pass over one;
- each method's pass: the width it feeds the target, its time, and the share of it spent outside the
  target's forward (drafting, the draft head, verification, sampling, the record);
- host reads per pass, peak device memory and, on the fast path, its static cache's size;
- the latency speedup each method would reach at the step compression its paper reports on that model:
  steps x (AR's time per token) / (the method's time per pass).

Where the shapes are cut down (`scale` < 1: every width divided, two layers), the figures test the
code, not a release.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import torch
import torch.nn.functional as F
from PIL import Image

from specviz.core.errors import UnsupportedMethod
from specviz.core.settings import SamplingSettings
from specviz.decoding.registry import get_method
from specviz.measure.cost import pass_costs
from specviz.measure.syncs import hidden_reads
from specviz.models.fast.fixed_passes import StaticPool
from specviz.models.hub import default_dtype
from specviz.models.networks.draft_head import DraftHead
from specviz.models.protocol import IMAGE_CELL, Geometry
from specviz.models.session import CachedSession, image_head, separate_prompts_session

SAMPLING = SamplingSettings(temperature=1.0, top_k=2000, top_p=1.0, guidance_scale=3.0)
# the memory bandwidth of the GPUs the report is run on, by the pieces of their name (`torch.cuda.get_device_name`)
BANDWIDTH = ((("H200",), "H200", 4.8e12), (("H100", "HBM3"), "H100 SXM", 3.35e12))
# one method of each family at its defaults, the trees with an EAGLE head as their papers run them; a
# shape's paper figures add their methods at the papers' settings
METHODS = {"ar": {}, "sjd": {}, "scd-mc": {}, "eagle2": {"drafter": "head"}, "peanut": {"drafter": "head"}}


@dataclass(frozen=True)
class PaperFigure:
    method: str
    settings: dict
    steps: float  # step compression, or a tree's mean acceptance length tau
    latency: float | None
    where: str


@dataclass(frozen=True)
class ReleaseShape:
    name: str
    family: str  # chameleon, emu3, janus or llamagen
    decoder: dict
    image_codes: int
    rows: int
    cols: int
    row_end: bool  # an end-of-row token after every row (Lumina-mGPT, Emu3)
    prompt_tokens: int
    unconditional_tokens: int
    paper: list[PaperFigure] = field(default_factory=list)

    def scaled(self, scale: float, keep_grid: bool = False) -> ReleaseShape:
        """The same family cut down: widths divided by 1/scale (heads kept whole), two layers, a 4x4 grid
        (`keep_grid`: the release's, for counting a schedule's passes on it)."""
        if scale >= 1:
            return self
        width = {"hidden_size", "intermediate_size", "dim"}
        decoder = {key: max(8, int(value * scale)) if key in width else value for key, value in self.decoder.items()}
        heads = max(1, int(self.decoder.get("num_attention_heads", self.decoder.get("n_head", 1)) * scale))
        for key in ("num_attention_heads", "num_key_value_heads", "n_head"):
            if key in decoder:
                decoder[key] = heads
        for key in ("num_hidden_layers", "n_layer"):
            if key in decoder:
                decoder[key] = 2
        if "block_size" in decoder:
            decoder["block_size"] = 16
        codes = max(64, int(self.image_codes * scale))
        if "vocab_size" in decoder and self.family == "llamagen":
            decoder["vocab_size"] = codes
        rows, cols = (self.rows, self.cols) if keep_grid else (4, 4)
        return ReleaseShape(self.name, self.family, decoder, codes, rows, cols, self.row_end, self.prompt_tokens,
                            self.unconditional_tokens, self.paper)  # fmt: skip


@cache
def release_shapes() -> dict[str, ReleaseShape]:
    text = resources.files("specviz.data").joinpath("release_shapes.json").read_text()
    shapes = {}
    for entry in json.loads(text)["shapes"]:
        paper = [PaperFigure(**figure) for figure in entry.pop("paper")]
        shapes[entry["name"]] = ReleaseShape(**entry, paper=paper)
    return shapes


@contextmanager
def _building_on(device: torch.device) -> Iterator[None]:
    """Modules created inside are allocated on `device` in its dtype (no float32 copy of 7B on the host)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(default_dtype(device))
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


def _geometry(shape: ReleaseShape) -> Geometry:
    """Image codes 0..codes-1, and where the release has one the end-of-row token `codes` after every row."""
    if not shape.row_end:
        return Geometry.plain_grid(shape.rows, shape.cols, shape.image_codes)
    layout = ((IMAGE_CELL,) * shape.cols + (shape.image_codes,)) * shape.rows
    return Geometry(shape.rows, shape.cols, shape.image_codes + 1, layout)


def _transformers_decoder(shape: ReleaseShape, positions: int):
    """The family's decoder stack as its adapter runs it: Chameleon's model, Emu3's text model, Janus's Llama."""
    from transformers import ChameleonConfig, ChameleonModel, Emu3TextConfig, Emu3TextModel, LlamaConfig, LlamaModel

    classes = {"chameleon": (ChameleonConfig, ChameleonModel), "emu3": (Emu3TextConfig, Emu3TextModel),
               "janus": (LlamaConfig, LlamaModel)}  # fmt: skip
    config_class, model_class = classes[shape.family]
    extra = {}
    if shape.family == "chameleon":  # its image encoder is built with the model but never runs in a pass: kept small
        vq = {"num_embeddings": shape.image_codes, "base_channels": 32, "channel_multiplier": [1, 1]}
        vq.update(num_res_blocks=1, attn_resolutions=[], latent_channels=32, resolution=16)
        extra = {"vocabulary_map": {"<image>": 0}, "vq_config": vq}
    config = config_class(**shape.decoder, **extra, max_position_embeddings=positions, attn_implementation="sdpa")
    return model_class(config).eval().requires_grad_(False)


class ShapeModel:
    """An `ImageModel` at a release's shapes, weights random; its images are noise, its costs are real."""

    reference_generate = None

    def __init__(
        self, shape: ReleaseShape, device: torch.device | str = "cpu", seed: int = 0, *, fast_path: bool = False
    ):
        self.shape = shape
        self.name = shape.name
        self.device = torch.device(device)
        self.default_sampling = SAMPLING
        self.geometry = _geometry(shape)
        self.fast_path = fast_path
        positions = shape.prompt_tokens + self.geometry.seq_len + 64
        torch.manual_seed(seed)
        with _building_on(self.device):
            if shape.family == "llamagen":
                self._adapter = _llamagen_adapter(shape, self.device, fast_path)
                self.static = self._adapter.static
                return
            self._adapter = None
            self.decoder = _transformers_decoder(shape, positions)
            # on the fast path, the adapters' pooled static caches and fixed-width passes (`fixed_passes`)
            self.static = StaticPool.for_model(self.decoder.config, self.geometry, self.device) if fast_path else None
            hidden = self.decoder.config.hidden_size
            vocab = self.decoder.config.vocab_size
            # method ids to the decoder's: the image codes (and the row end) sit at the top of its vocabulary
            self._input_ids = torch.arange(self.geometry.vocab_size) + vocab - self.geometry.vocab_size
            self._head = self._image_head(hidden)
            embed = self.decoder.get_input_embeddings()
            self.draft_head = DraftHead.sized_for(
                self.decoder.config, lambda ids: embed(self._input_ids[ids]), self._head
            ).eval()
            self.token_vectors = torch.randn(self.geometry.vocab_size, 8).float()
            self.token_vectors[shape.image_codes :] = 1e4  # the row end, far from every code
            self._prompts = [torch.randint(vocab, (1, length)) for length in
                             (shape.prompt_tokens, shape.unconditional_tokens)]  # fmt: skip

    def _image_head(self, hidden: int):
        """Chameleon and Emu3: the LM head's image rows; Janus: its generation head, an MLP H -> H -> codes."""
        codes = self.shape.image_codes
        if self.shape.family != "janus":
            return image_head(torch.randn(codes, hidden) * hidden**-0.5, layout_tokens=int(self.shape.row_end))
        first, second = torch.randn(hidden, hidden) * hidden**-0.5, torch.randn(codes, hidden) * hidden**-0.5
        return lambda features: F.linear(F.gelu(F.linear(features, first)), second)

    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        if self._adapter is not None:
            return self._adapter.session(prompt, guidance_scale)
        prompts = self._prompts[: 1 if guidance_scale == 1.0 else 2]
        with torch.inference_mode():
            return separate_prompts_session(
                self.geometry,
                prompts,
                self.decoder,
                self._input_ids,
                self._head,
                guidance_scale,
                token_vectors=self.token_vectors,
                draft_head=self.draft_head,
                static=self.static,
            )

    def decode(self, tokens) -> Image.Image:
        """Random weights draw noise: a grey image of the grid's size."""
        return Image.new("RGB", (self.geometry.cols * 8, self.geometry.rows * 8), (128, 128, 128))


def _llamagen_adapter(shape: ReleaseShape, device: torch.device, fast_path: bool):
    """LlamaGen's own adapter over its GPT at this shape and a VQ decoder of its codebook size."""
    from specviz.models.llamagen.adapter import LlamaGenConfig, LlamaGenModel, LlamaGenTransformer
    from specviz.models.llamagen.vq import VQDecoder, VQDecoderConfig

    config = LlamaGenConfig(**shape.decoder)
    small = VQDecoderConfig(config.vocab_size, z_channels=32, base_channels=32, channel_multipliers=(1, 2))
    vq = VQDecoder(small)  # decodes noise anyway: only the GPT is measured
    return LlamaGenModel.from_model(LlamaGenTransformer(config).eval(), vq, device, fast_path=fast_path)


# ---- measuring -----------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_method(model, method: str, settings: dict, passes: int, warmup: int = 2) -> dict:
    """Median ms of a pass of `method` after its first record (and `warmup` more), and the mean number of
    tokens each pass fed the target."""
    spec = get_method(method)
    params = spec.resolve(settings)
    times = []
    with torch.inference_mode():
        decoder = spec.open(model, "207", 0, model.default_sampling, params)
        decoder.next()
        for _ in range(warmup):
            decoder.next()
        session = decoder.session
        fed, nfe = session.tokens_fed, session.nfe
        for _ in range(passes):
            _sync(model.device)
            started = time.perf_counter()
            if decoder.next() is None:
                break
            _sync(model.device)
            times.append((time.perf_counter() - started) * 1000)
        width = (session.tokens_fed - fed) / max(1, session.nfe - nfe)
    return {"ms": statistics.median(times), "width": width, "passes": len(times)}


def weight_read_floor(parameters: int, device: torch.device) -> tuple[float | None, str]:
    """The least a pass can cost on `device`: ms to read `parameters` bf16 weights once at its memory
    bandwidth, and the device as named; None (said so) where its bandwidth is not known here."""
    if device.type != "cuda":
        return None, "not given: not a GPU"
    name = torch.cuda.get_device_name(device)
    for pieces, label, bandwidth in BANDWIDTH:
        if all(piece in name for piece in pieces):
            return parameters * 2 / bandwidth * 1000, f"{label}, {bandwidth / 1e12:.2f} TB/s"
    return None, f"not given: the memory bandwidth of {name} is not known here"


def measure_shape(
    shape: ReleaseShape, device: torch.device, sizes: tuple[int, ...], repeats: int, passes: int, fast_path: bool
) -> dict:
    """Every figure of one release shape on `device`, on its fast path or its plain path (see the module
    docstring)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    model = ShapeModel(shape, device, fast_path=fast_path)
    entry: dict = {"name": shape.name, "family": shape.family, "path": "fast" if fast_path else "plain"}
    entry["build_s"] = round(time.perf_counter() - started, 1)
    entry["parameters"] = decoder_parameters(model)
    entry["floor_ms"], entry["floor"] = weight_read_floor(entry["parameters"], device)
    costs = pass_costs(model, "207", sizes, repeats)
    entry["pass_cost"] = [{"tokens": c.tokens, "ms": c.ms, "ratio": c.ratio} for c in costs]
    wanted = {method: {**settings} for method, settings in METHODS.items()}
    wanted.update({figure.method: figure.settings for figure in shape.paper})
    rows = []
    for method, settings in wanted.items():
        try:
            timed = time_method(model, method, settings, passes)
        except UnsupportedMethod as refusal:
            rows.append({"method": method, "settings": settings, "refused": str(refusal)})
            continue
        forward = pass_costs(model, "207", (1, max(1, round(timed["width"]))), repeats)[-1].ms
        reads = hidden_reads(model, method, settings, passes=2, prompt="207")
        outside = max(0.0, timed["ms"] - forward) / timed["ms"]
        row = {"method": method, "settings": settings, **timed, "forward_ms": forward, "outside_forward": outside}
        rows.append({**row, "reads_per_pass": reads / 2})
    entry["methods"] = rows
    ar = next(row for row in rows if row["method"] == "ar")
    entry["ar_ms_per_token"] = ar["ms"]
    timed = {row["method"]: row for row in rows if "ms" in row}
    entry["predicted"] = [
        {"method": f.method, "steps": f.steps, "paper_latency": f.latency, "where": f.where,
         "latency": f.steps * ar["ms"] / timed[f.method]["ms"] if f.method in timed else None}
        for f in shape.paper
    ]  # fmt: skip
    if model.static is not None:  # each session was gone before the next began: one cache, back home
        entry["static_cache_gb"] = round(model.static.cache_bytes / 2**30, 2)
    if device.type == "cuda":
        entry["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    del model
    gc.collect()  # the draft head's embedding closure holds the model in a cycle
    return entry


def decoder_parameters(model: ShapeModel) -> int:
    """The decoder stack's parameters, embeddings included, LM head and draft head not."""
    decoder = model.decoder if model._adapter is None else model._adapter.gpt
    return sum(parameter.numel() for name, parameter in decoder.named_parameters() if not name.startswith("output"))


def _cell(value: float | None, form: str) -> str:
    """A number in a table, "-" where there is none."""
    return "-" if value is None else format(value, form)


def shapes_markdown(entries: list[dict]) -> list[str]:
    """The report's section: per shape and path its AR time beside the weight-read floor and its pass costs,
    each method's pass, and the predicted speedups on both paths."""
    sizes = sorted({cost["tokens"] for entry in entries for cost in entry["pass_cost"]} - {1})
    lines = [
        "## Release shapes, random weights",
        "",
        "Each release's decoder at its own shapes, weights random in the device's dtype, behind its family's "
        "session code, on the fast path (a static cache, passes padded to powers of two, CUDA graphs on a GPU) "
        "and on the plain path. Acceptance means nothing here (the weights are random); what a pass costs is a "
        "release's. The floor is the least a pass can cost: the decoder's parameters x 2 bytes (bf16) read once "
        "at the device's memory bandwidth; a fast-path pass also reads its whole static cache (its attention "
        "spans every slot), and pads to a power of two (a pass of 65 tokens runs 128).",
        "",
        "| model | path | decoder parameters | AR ms / token | floor ms | AR / floor | "
        + " | ".join(f"pass of {n} / 1" for n in sizes)
        + " | static cache GB | peak GB |",
        "|---|---|---:|---:|---:|---:|" + "---:|" * len(sizes) + "---:|---:|",
    ]
    for entry in entries:
        ratio = {cost["tokens"]: f"{cost['ratio']:.2f}" for cost in entry["pass_cost"]}
        ar, floor = entry["ar_ms_per_token"], entry["floor_ms"]
        cells = [entry["name"], entry["path"], f"{entry['parameters'] / 1e9:.2f} B", f"{ar:.2f}"]
        cells += [_cell(floor, ".2f"), _cell(None if floor is None else ar / floor, ".1f")]
        cells += [ratio.get(n, "-") for n in sizes]
        cells += [str(entry.get("static_cache_gb", "-")), str(entry.get("peak_memory_gb", "-"))]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Floor: " + "; ".join(sorted({entry["floor"] for entry in entries})) + "."]
    lines += [
        "",
        "A method's pass: the tokens it fed the target, its time, the target's forward over as many tokens, the "
        "share spent outside that forward (drafting, a draft head, verification, sampling, the record) and its "
        "hidden host reads.",
        "",
        "| model | path | method | settings | tokens per pass | ms per pass | forward ms | outside the forward "
        "| reads |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for entry in entries:
        for row in entry["methods"]:
            settings = ", ".join(f"{key} {value}" for key, value in row["settings"].items()) or "defaults"
            cells = [entry["name"], entry["path"], row["method"], settings]
            if "refused" in row:
                cells += ["refused: " + row["refused"].split(";")[0], "", "", "", ""]
            else:
                cells += [f"{row['width']:.1f}", f"{row['ms']:.2f}", f"{row['forward_ms']:.2f}"]
                cells += [f"{row['outside_forward']:.0%}", f"{row['reads_per_pass']:.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return [*lines, "", *_predicted_lines(entries)]


def _predicted_lines(entries: list[dict]) -> list[str]:
    """The paper figures' predicted latency on each path, beside AR's ms per token there and the floor."""
    lines = [
        "The latency each method would reach at its paper's step compression on that model: steps x AR's ms per "
        "token / the method's ms per pass, on each path; beside it AR's ms per token on the fast path, the plain "
        "path and the floor.",
        "",
        "| model | method | paper's steps | paper's latency | predicted, fast path | predicted, plain path | "
        "AR ms / token: fast, plain, floor | source |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    shapes: dict[str, dict[str, dict]] = {}
    for entry in entries:
        shapes.setdefault(entry["name"], {})[entry["path"]] = entry
    for name, paths in shapes.items():
        first = next(iter(paths.values()))
        ar = [f"{paths[path]['ar_ms_per_token']:.2f}" if path in paths else "-" for path in ("fast", "plain")]
        ar_cells = ", ".join([*ar, _cell(first["floor_ms"], ".2f")])
        for index, figure in enumerate(first["predicted"]):
            here = [paths[path]["predicted"][index]["latency"] if path in paths else None for path in ("fast", "plain")]
            paper = "-" if figure["paper_latency"] is None else f"{figure['paper_latency']:.2f}x"
            cells = [name, figure["method"], f"{figure['steps']:.2f}", paper]
            cells += ["-" if value is None else f"{value:.2f}x" for value in here]
            lines.append("| " + " | ".join([*cells, ar_cells, figure["where"]]) + " |")
    return lines
