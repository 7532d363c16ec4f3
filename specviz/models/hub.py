"""Loading the transformers-based families: weights from a local folder or a hub id, never remote code.

Shared by the adapters: where the weights are (`--weights`, an environment variable, or the release's
hub id), whether they can load with no network, bf16 on CUDA and float32 on CPU, a GPU-memory
estimate from the parameter count before anything is loaded, and errors that say what to pass. Also
the pixel helpers the decoders share.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from PIL import Image

from specviz.core.errors import ModelUnavailable
from specviz.models.protocol import BLANK, Geometry

GIB = 1024**3
T = TypeVar("T")
# bf16 weights plus room for activations, the KV cache of two guidance rows and the allocator
MEMORY_OVERHEAD = 1.15
MEMORY_MARGIN_GIB = 2.0


def resolve_weights(weights: str | os.PathLike | None, env_var: str, default_id: str) -> str:
    """`--weights` if given, else the folder named by `env_var`, else the release's hub id."""
    if weights:
        return str(weights)
    return os.environ.get(env_var) or default_id


def looks_like_path(weights: str) -> bool:
    """A folder rather than a hub id ("namespace/name")."""
    return weights.startswith((".", "/", "~")) or weights.count("/") > 1 or "\\" in weights or Path(weights).exists()


def in_hub_cache(repo: str, *names: str) -> bool:
    """Whether every named file of hub repository `repo` is in the local hub cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return all(isinstance(try_to_load_from_cache(repo, name), str) for name in names)
    except Exception:  # a broken cache is the same as none
        return False


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """None when the model hub answers a TCP connection within `timeout` seconds, else why not; so that a
    machine without network fails at once instead of after transformers' retries (30 s measured)."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    endpoint = urlparse(constants.ENDPOINT)
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        return f"cannot reach {host} ({error.strerror or error})"
    return None


def require_hub(name: str, repo: str, files: tuple[str, ...], hint: str) -> None:
    """Refuse at once to fetch `files` of hub repository `repo` when they are not cached and the hub is
    unreachable."""
    if in_hub_cache(repo, *files):
        return
    reason = hub_unreachable()
    if reason is not None:
        raise ModelUnavailable(
            f"{name}: {repo} is not in the local hub cache and the hub is offline ({reason}); {hint}"
        )


def offline_reason(env_var: str, default_id: str) -> str | None:
    """None when the weights can load with no network (a local folder, or the hub cache), else why not."""
    local = os.environ.get(env_var)
    if local:
        if (Path(local).expanduser() / "config.json").is_file():
            return None
        return f"{env_var}={local} has no config.json"
    if in_hub_cache(default_id, "config.json") and (
        in_hub_cache(default_id, "model.safetensors.index.json") or in_hub_cache(default_id, "model.safetensors")
    ):
        return None
    return f"needs the weights of {default_id}: pass --weights with a local folder or hub id, or set {env_var}"


def default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def first_line(error: BaseException, limit: int = 300) -> str:
    """An error's message as one line (its first non-empty line, at most `limit` characters), so that a
    refusal stays one line whatever the library below wrote."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(error: BaseException, limit: int = 300) -> str:
    """All of an error's message on one line, for errors whose first line says little (torch's
    `load_state_dict`: "Error(s) in loading state_dict for X:", the mismatches below it)."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def out_of_memory(error: BaseException) -> bool:
    return isinstance(error, (torch.OutOfMemoryError, MemoryError))


def memory_unavailable(name: str, device: torch.device | str, error: BaseException) -> ModelUnavailable:
    """The refusal for memory that ran out while loading onto `device` (GPU or host memory)."""
    elsewhere = ", or use --device cpu" if torch.device(device).type == "cuda" else ""
    return ModelUnavailable(
        f"{name}: ran out of memory loading onto {device} ({first_line(error, 160)}); free the memory other "
        f"programs hold or pick a smaller variant{elsewhere}"
    )


def _unavailable(
    name: str, weights: str, error: BaseException, default_id: str, device: torch.device | str = "cpu"
) -> ModelUnavailable:
    if out_of_memory(error):
        return memory_unavailable(name, device, error)
    where = f"local folder {weights}" if looks_like_path(weights) else f"hub id {weights}"
    return ModelUnavailable(
        f"{name}: cannot load weights from {where} ({first_line(error)}); "
        f"download {default_id} where you have network and pass its folder with --weights PATH, "
        f"or pass another hub id with --weights"
    )


def check_device(name: str, device: torch.device) -> None:
    """Refuse a CUDA device where CUDA is not available."""
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelUnavailable(f"{name}: device {device} requested but CUDA is not available; use --device cpu")


def check_gpu_memory(
    name: str, skeleton: Callable[[], torch.nn.Module], device: torch.device, smaller: str | None = None
) -> None:
    """Refuse early, with the amount needed, when the GPU cannot hold the model in bf16; `skeleton`
    builds the network, on the meta device here, so only its parameter count is computed."""
    if device.type != "cuda":
        return
    with torch.device("meta"):
        parameters = sum(p.numel() for p in skeleton().parameters())
    needed = parameters * 2 * MEMORY_OVERHEAD / GIB + MEMORY_MARGIN_GIB
    free, total = torch.cuda.mem_get_info(device)
    if needed > free / GIB:
        hint = f"; try a smaller variant (--weights {smaller})" if smaller else ""
        raise ModelUnavailable(
            f"{name}: needs about {needed:.1f} GiB of GPU memory in bf16 ({parameters / 1e9:.2f}B parameters), "
            f"but {device} has {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB{hint}, or use --device cpu"
        )


def adapted(name: str, device: torch.device | str, build: Callable[[], T]) -> T:
    """`build()`, which wraps a loaded network in its adapter, with its refusals as one-line
    `ModelUnavailable`s: a network whose vocabulary or codebook is not the family's (the adapters'
    ValueError), or memory that runs out."""
    try:
        return build()
    except (torch.OutOfMemoryError, MemoryError) as error:
        raise memory_unavailable(name, device, error) from error
    except ValueError as error:
        message = first_line(error)  # the adapters' messages mostly start with "family:" already
        named = message.split(" ", 1)[0].endswith(":")
        raise ModelUnavailable(message if named else f"{name}: {message}") from error


# (checkpoint key, checkpoint tensor, the model's shape) -> the tensor in the model's layout, or None
Reshape = Callable[[str, torch.Tensor, torch.Size], torch.Tensor | None]


def load_pretrained(
    name: str,
    model_cls,
    weights: str | os.PathLike | None,
    device: str | torch.device,
    *,
    default_id: str,
    env_var: str,
    smaller: str | None = None,
    reshape: Reshape | None = None,
):
    """(model, processor) from a local folder or hub id, in eval mode on `device`; never remote code.

    Any failure (a missing or broken file, weights of the wrong shape, memory) is a one-line
    `ModelUnavailable`. A weight whose shape differs from the model's is taken only where `reshape`
    turns it into the model's layout (a family's known alternative layout), else refused."""
    from transformers import AutoConfig, AutoProcessor

    device = torch.device(device)
    source = resolve_weights(weights, env_var, default_id)
    if looks_like_path(source):
        folder = Path(source).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelUnavailable(
                f"{name}: no config.json in {folder}; pass --weights with a folder holding the transformers "
                f"checkpoint of {default_id} (config.json, safetensors, processor files)"
            )
        source = str(folder)
    else:
        hint = f"download {default_id} where you have network and pass its folder with --weights PATH"
        require_hub(name, source, ("config.json",), hint)
    check_device(name, device)
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
        check_gpu_memory(name, lambda: model_cls._from_config(config), device, smaller)
        processor = AutoProcessor.from_pretrained(source, trust_remote_code=False)
        # mismatched shapes are settled below, with a message that names them
        model, info = model_cls.from_pretrained(
            source,
            dtype=default_dtype(device),
            trust_remote_code=False,
            ignore_mismatched_sizes=True,
            output_loading_info=True,
        )
        settle_mismatches(name, model, source, info.get("mismatched_keys", ()), reshape)
        model = model.to(device)
    except ModelUnavailable:
        raise
    except Exception as error:  # whatever transformers, safetensors or the hub raise: one line
        raise _unavailable(name, source, error, default_id, device) from error
    return model.eval().requires_grad_(False), processor


def settle_mismatches(
    name: str,
    model: torch.nn.Module,
    source: str,
    mismatched: Iterable[tuple[str, Sequence[int], Sequence[int]]],
    reshape: Reshape | None,
) -> None:
    """Put the checkpoint's tensors that transformers could not load for their shape into `model` in its
    layout, as `reshape` gives them; refuse in one line, naming a few, where it gives none."""
    mismatched = sorted((key, torch.Size(found), torch.Size(expected)) for key, found, expected in mismatched)
    if not mismatched:
        return
    # decide on shapes alone first (meta tensors), so that nothing is read for a checkpoint we refuse
    refused = [
        (key, found, expected)
        for key, found, expected in mismatched
        if not _fits(reshape, key, torch.empty(found, device="meta"), expected)
    ]
    if refused:
        named = ", ".join(
            f"{key} is {tuple(found)} in the checkpoint, {tuple(expected)} in the model"
            for key, found, expected in refused[:3]
        )
        more = f" (and {len(refused) - 3} more)" if len(refused) > 3 else ""
        raise ModelUnavailable(
            f"{name}: the weights in {source} do not fit its config.json: {named}{more}; pass an unmodified "
            "checkpoint of this model"
        )
    tensors = checkpoint_tensors(name, source, [key for key, _, _ in mismatched])
    with torch.no_grad():
        for key, _, expected in mismatched:
            parameter = model.get_parameter(key)
            parameter.copy_(reshape(key, tensors[key], expected).to(parameter.dtype))


def _fits(reshape: Reshape | None, key: str, tensor: torch.Tensor, expected: torch.Size) -> bool:
    if reshape is None:
        return False
    reshaped = reshape(key, tensor, expected)
    return reshaped is not None and reshaped.shape == expected


def checkpoint_tensors(name: str, source: str, keys: list[str]) -> dict[str, torch.Tensor]:
    """The named tensors as the safetensors checkpoint at `source` (a folder, or a hub id already in the
    cache, as `from_pretrained` leaves it) stores them."""
    from safetensors import safe_open

    def weight_file(file: str) -> Path | None:
        if looks_like_path(source):
            path = Path(source) / file
            return path if path.is_file() else None
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(source, file)
        return Path(found) if isinstance(found, str) else None

    index = weight_file("model.safetensors.index.json")
    if index is not None:
        import json

        weight_map = json.loads(index.read_text())["weight_map"]
        files = {key: weight_map.get(key) for key in keys}
    else:
        files = dict.fromkeys(keys, "model.safetensors")
    tensors = {}
    for key, file in files.items():
        path = weight_file(file) if file else None
        if path is None:
            raise ModelUnavailable(f"{name}: cannot find {key} in the safetensors files of {source}")
        with safe_open(str(path), framework="pt") as handle:
            tensors[key] = handle.get_tensor(key)
    return tensors


def read_checkpoint(
    name: str, path: Path, prefer: tuple[str, ...] = ("model", "module", "state_dict")
) -> dict[str, torch.Tensor]:
    """The state dict of a training checkpoint (its first entry of `prefer` that holds one: MAR prefers
    "model_ema"), loaded without running pickled code."""
    import argparse

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        # training checkpoints may also hold their argparse arguments: allow that one plain class
        with torch.serialization.safe_globals([argparse.Namespace]):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        if out_of_memory(error):
            raise memory_unavailable(name, "cpu", error) from error
        raise ModelUnavailable(
            f"{name}: cannot read {path} safely ({first_line(error)}); it must be a torch.save'd dict "
            "of tensors (weights_only) or a safetensors file"
        ) from error
    for key in prefer:
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict):
            return checkpoint[key]
    if isinstance(checkpoint, dict) and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return checkpoint  # a bare state dict (FSDP exports)
    raise ModelUnavailable(f"{name}: {path} holds no state dict (looked for {', '.join(prefer)})")


def normalisation(processor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) per channel the image processor normalises with; 0.5 when there is none."""
    image_processor = getattr(processor, "image_processor", None)
    mean = getattr(image_processor, "image_mean", None) or (0.5, 0.5, 0.5)
    std = getattr(image_processor, "image_std", None) or (0.5, 0.5, 0.5)
    return torch.tensor(mean, dtype=torch.float32), torch.tensor(std, dtype=torch.float32)


def to_image(
    pixels: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, generated: torch.Tensor | None = None
) -> Image.Image:
    """(C, H, W) normalised pixels -> RGB image; cells where `generated` (rows, cols) is False are blank."""
    pixels = pixels.detach().float().cpu()
    pixels = pixels * std.view(-1, 1, 1) + mean.view(-1, 1, 1)
    array = (pixels.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0)
    if generated is not None:
        rows, cols = generated.shape
        scale_y, scale_x = array.shape[0] // rows, array.shape[1] // cols
        mask = generated.cpu().repeat_interleave(scale_y, 0).repeat_interleave(scale_x, 1)
        array[~mask] = BLANK
    return Image.fromarray(np.ascontiguousarray(array.numpy()))


def grid_codes(tokens: list[int] | torch.Tensor, geometry: Geometry, codes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A possibly partial sequence of method ids on the grid, on the CPU: (rows * cols,) codes in raster
    order (cells not generated yet hold code 0; ids clamped into the `codes` image codes), and the
    (rows, cols) mask of the cells generated so far. Layout slots are skipped."""
    tokens = torch.as_tensor(tokens, dtype=torch.long).flatten().cpu()
    if len(tokens) > geometry.seq_len:
        raise ValueError(f"{len(tokens)} tokens for a sequence of {geometry.seq_len} positions")
    cells = torch.tensor(geometry.cell_of_position()[: len(tokens)], dtype=torch.long)
    image = cells >= 0
    grid = torch.zeros(geometry.rows * geometry.cols, dtype=torch.long)
    grid[cells[image]] = tokens[image].clamp(0, codes - 1)
    generated = torch.zeros(geometry.rows * geometry.cols, dtype=torch.bool)
    generated[cells[image]] = True
    return grid, generated.view(geometry.rows, geometry.cols)
