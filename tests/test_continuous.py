"""Continuous tokens: the diffusion head, the continuous protocol, the CSpD methods and their proofs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import specviz.decoding.cspd_exact as cspd_exact
from specviz import metrics
from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings, SettingsError
from specviz.decoding.runner import run
from specviz.measure.continuous_lossless import energy_test, method_samples
from specviz.models.networks.diffusion_head import (
    TRAINING_STEPS,
    DenoiserMLP,
    DiffusionHead,
    Schedule,
    diffusion_loss,
    transition_moments,
)
from specviz.models.protocol import UnsupportedMethod
from specviz.models.registry import get_entry
from specviz.models.tiny_continuous.adapter import ASSETS as CONTINUOUS_ASSETS
from specviz.models.tiny_continuous.adapter import TinyContinuousModel
from specviz.models.tiny_continuous.network import ContinuousConfig, ContinuousTextToImage
from specviz.models.tiny_continuous.projection import PatchProjection
from specviz.models.toys.continuous import ContinuousToy
from specviz.stage.recognition import drawn, load_embedded, recognition
from specviz.trace import Trace, TraceError
from specviz.training.tiny_continuous import distillation_loss

SMALL = ContinuousConfig(
    rows=4, cols=4, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, head_width=32, head_blocks=1,
    sampling_steps=6,
)  # fmt: skip


def random_network(config: ContinuousConfig, seed: int) -> ContinuousTextToImage:
    """Random weights everywhere, the denoiser's zero-initialised layers included (an untrained head
    would predict epsilon 0 and be the same in target and draft)."""
    torch.manual_seed(seed)
    network = ContinuousTextToImage(config)
    with torch.no_grad():
        for parameter in network.denoiser.parameters():
            if not parameter.abs().sum():
                parameter.normal_(0, 0.05)
    return network


@pytest.fixture(scope="module")
def pair() -> TinyContinuousModel:
    projection = PatchProjection(torch.full((27,), 0.5), torch.linalg.qr(torch.randn(27, 12))[0], 0.5)
    return TinyContinuousModel(random_network(SMALL, 0), random_network(SMALL, 1), projection, torch.device("cpu"))


def test_sampled_path_is_what_the_head_evaluates_along_it(pair):
    head = pair.target_head
    conditions = torch.randn(5, 2, SMALL.hidden_size)
    path = head.sample(conditions, torch.randn(5, head.steps + 1, 12), 1.7, 0.9)
    again = head.along(conditions, path.states, 1.7, 0.9)
    assert torch.allclose(again.means, path.means, atol=1e-5) and torch.allclose(again.log_vars, path.log_vars)
    by_hand = sum(
        -0.5 * (((path.states[:, k + 1] - path.means[:, k]) ** 2) / path.log_vars[:, k].exp()
                + path.log_vars[:, k] + math.log(2 * math.pi)).sum(-1)
        for k in range(head.steps)
    ) - 0.5 * (path.states[:, 0] ** 2 + math.log(2 * math.pi)).sum(-1)  # fmt: skip
    assert torch.allclose(path.log_density(), by_hand, atol=1e-4)


def test_guidance_one_is_the_conditional_head(pair):
    head = pair.target_head
    conditions, noise = torch.randn(3, 2, SMALL.hidden_size), torch.randn(3, head.steps + 1, 12)
    mixed = head.sample(conditions, noise, 1.0, 1.0)
    alone = head.sample(conditions[:, :1], noise, 1.0, 1.0)
    assert torch.allclose(mixed.states, alone.states, atol=1e-5)


def test_the_training_loss_teaches_a_head_a_conditional_gaussian():
    torch.manual_seed(0)
    network = DenoiserMLP(2, 4, 48, 2)
    schedule = Schedule.respaced(TRAINING_STEPS)
    optimizer = torch.optim.AdamW(network.parameters(), lr=3e-3)
    for _ in range(1500):
        label = torch.randint(2, (256,))
        centre = torch.stack([label * 2.0 - 1, torch.full((256,), 0.5)], 1)
        loss = diffusion_loss(
            network, centre + 0.2 * torch.randn(256, 2), torch.nn.functional.one_hot(label, 4).float(), schedule
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    head = DiffusionHead(network.eval(), 20)
    with torch.no_grad():
        condition = torch.nn.functional.one_hot(torch.ones(3000, dtype=torch.long), 4).float()[:, None]
        tokens = head.sample(condition, torch.randn(3000, 21, 2), 1.0, 1.0).tokens
    assert torch.allclose(tokens.mean(0), torch.tensor([1.0, 0.5]), atol=0.1)
    assert ((tokens.std(0) - 0.2).abs() < 0.1).all()  # data std 0.2, not the prior 1


def test_the_distilled_step_is_the_step_the_head_samples(pair):
    """distillation_loss compares the two heads' transitions through transition_moments; these are the
    means and variances of the head's own sampled path, guidance included, at every step."""
    head, network = pair.target_head, pair.target_head.network
    conditions = torch.randn(4, 2, SMALL.hidden_size)
    path = head.sample(conditions, torch.randn(4, head.steps + 1, 12), 2.0, 1.0)
    for k in range(head.steps):  # sampling step k runs at the schedule's index steps - 1 - k
        index = torch.full((4,), head.steps - 1 - k)
        x = path.states[:, k]
        with torch.no_grad():
            eps, v = network(
                x.repeat(2, 1), head.schedule.timesteps[index].repeat(2), conditions.transpose(0, 1).reshape(8, -1)
            )
        (eps_prompt, eps_null), v_prompt = eps.chunk(2), v.chunk(2)[0]
        mean, log_var = transition_moments(head.schedule, index, x, torch.lerp(eps_null, eps_prompt, 2.0), v_prompt)
        assert torch.allclose(mean, path.means[:, k], rtol=1e-4, atol=1e-4), k
        assert torch.allclose(log_var, path.log_vars[:, k], atol=1e-5), k


def test_distillation_is_zero_for_the_target_itself_and_brings_a_draft_towards_it():
    target, draft = random_network(SMALL, 0).eval(), random_network(SMALL, 1)
    sampling = Schedule.respaced(SMALL.sampling_steps)
    text, tokens = torch.randn(8, SMALL.text_dim), torch.randn(8, SMALL.rows * SMALL.cols, 12)
    with torch.no_grad():
        assert distillation_loss(target, target, text, tokens, sampling, 2.0).item() == pytest.approx(0.0, abs=1e-6)

    def measured() -> float:
        torch.manual_seed(7)
        with torch.no_grad():
            return distillation_loss(draft.eval(), target, text, tokens, sampling, 2.0).item()

    before = measured()
    optimizer = torch.optim.AdamW(draft.parameters(), lr=3e-3)
    for _ in range(40):
        loss = distillation_loss(draft.train(), target, text, tokens, sampling, 2.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert all(p.grad is None for p in target.parameters())  # the target only teaches
    assert measured() < 0.5 * before


def test_the_backbone_reads_noised_tokens_while_the_head_learns_the_clean_ones(monkeypatch):
    """Input noise (the cure for a backbone that drifts off exact data vectors when it reads its own
    draws): the conditions come from noised tokens, spread at most the given level, and the
    diffusion loss's targets are the tokens themselves."""
    import specviz.models.tiny_continuous.network as network_module

    model = random_network(SMALL, 0)
    text, tokens = torch.randn(16, SMALL.text_dim), torch.randn(16, SMALL.rows * SMALL.cols, 12)
    seen, targets = [], []
    conditions = model.conditions
    monkeypatch.setattr(model, "conditions", lambda t, d, x: seen.append(x) or conditions(t, d, x))
    monkeypatch.setattr(network_module, "diffusion_loss", lambda net, x0, z, schedule: targets.append(x0) or z.sum())
    drop = torch.zeros(16, dtype=torch.bool)
    schedule = Schedule.respaced(TRAINING_STEPS)
    model.training_loss(text, drop, tokens, schedule, repeats=1)
    model.training_loss(text, drop, tokens, schedule, repeats=1, input_noise=0.05)
    assert seen[0] is tokens and torch.equal(targets[0], tokens.reshape(-1, 12))
    assert torch.equal(targets[1], tokens.reshape(-1, 12))
    spread = (seen[1] - tokens).std(dim=(1, 2))
    assert (spread > 0).all() and (spread < 0.06).all() and spread.max() > 0.02  # a level drawn per image


def test_caption_vectors_encode_each_distinct_caption_once_and_come_back_from_the_cache(tmp_path, monkeypatch):
    import specviz.training.tiny as tiny_train

    encoded = []

    class CountingEncoder:
        def __call__(self, texts):
            encoded.append(list(texts))
            return torch.stack([torch.full((4,), float(len(text))) for text in texts])

    monkeypatch.setattr(tiny_train, "TextEncoder", CountingEncoder)
    captions = ["cat", "red apple", "cat", "sun", "red apple"]
    first = tiny_train.caption_vectors(captions, tmp_path)
    assert encoded == [["cat", "red apple", "sun"]]
    assert first[:, 0].tolist() == [3.0, 9.0, 3.0, 3.0, 9.0]
    again = tiny_train.caption_vectors(captions, tmp_path)
    assert len(encoded) == 1 and torch.equal(again, first)
    (stored,) = tmp_path.glob("caption-vectors-*.safetensors")  # the float16 copy a device call carries
    vectors = load_file(str(stored))
    save_file({"vectors": vectors["vectors"].half(), "index": vectors["index"]}, str(stored))
    halved = tiny_train.caption_vectors(captions, tmp_path)
    assert len(encoded) == 1 and halved.dtype == torch.float32 and torch.equal(halved, first)


def test_the_pair_offers_the_captions_of_the_designs_it_was_trained_on():
    """The shipped pair was trained on tiny-uncertain's four designs, so the app lists those captions."""
    trained = json.loads((CONTINUOUS_ASSETS / "target.json").read_text())["training"]
    known = get_entry("tiny-continuous").known_prompts()
    assert sorted(trained["data"]) == ["fluent", "noto", "openmoji", "twemoji"]
    assert known == get_entry("tiny-uncertain").known_prompts() and len(known) > len(get_entry("tiny").known_prompts())


def test_the_recognition_measure_draws_from_the_pair_and_knows_its_folder(pair):
    images, asked = drawn(pair, ["red apple", "a blue car"], seeds=2)
    assert images.shape == (4, 12, 12, 3) and images.dtype == np.uint8
    assert asked == ["red apple", "red apple", "a blue car", "a blue car"]
    assert not np.array_equal(images[0], images[1])  # each seed its own sample
    assert recognition(images, asked, images, asked).top1 == 1.0
    assert isinstance(load_embedded(CONTINUOUS_ASSETS), TinyContinuousModel)


def test_a_session_truncated_or_rolled_back_has_the_conditions_of_a_fresh_one(pair):
    session = pair.session("red apple", 2.0).draft
    tokens = torch.randn(6, 12)
    session.forward(tokens[:4])
    session.commit(4)
    session.forward(tokens[4:])
    session.commit(0)  # a rollback
    session.truncate(2)
    fresh = pair.session("red apple", 2.0).draft
    fresh.forward(tokens[:2])
    fresh.commit(2)
    assert session.position == 2 and torch.allclose(session.next_condition, fresh.next_condition, atol=1e-5)
    assert torch.allclose(session.forward(tokens[2:5]), fresh.forward(tokens[2:5]), atol=1e-5)


@pytest.mark.parametrize("method", ["ar", "ar-draft", "cspd", "cspd-exact"])
def test_each_continuous_method_makes_a_whole_image_and_a_valid_trace(pair, method):
    params = {"gamma": 3} if method.startswith("cspd") else None
    trace = run(pair, method, "red apple", 0, params=params)
    assert len(trace.vectors) == len(trace.tokens) == 16 and trace.draft_nfe >= 1
    again = Trace.from_json(trace.to_json())
    assert again.vectors == trace.vectors and again.continuous
    assert pair.decode(trace.vectors).size == (12, 12)
    steps = list(trace.iterations)
    if method.startswith("cspd"):
        prefilled = math.ceil(0.05 * 16)
        assert [s.source for s in steps[:prefilled]] == [["target"]] * prefilled
        drafted = [s for s in steps if s.fate]
        assert drafted and all(len(s.draft_path[0]) == pair.target_head.steps + 1 for s in drafted)
        assert all((s.log_sigma is not None) == (method == "cspd") for s in drafted)
    assert run(pair, method, "red apple", 0, params=params).vectors == trace.vectors  # seeded


def test_the_draft_alone_is_reported_as_the_draft_not_as_a_speedup(pair):
    """ar-draft is another model, not a decoding of the target: its passes are the draft's, its map says
    nothing was verified, and the race states its time as the cost ratio c."""
    from specviz import viz
    from specviz.decoding import RunStream
    from specviz.ui.race import passes, race_summary

    alone, ar = run(pair, "ar-draft", "red apple", 0), run(pair, "ar", "red apple", 0)
    assert metrics.draft_alone(alone) and not metrics.draft_alone(ar)
    live = RunStream(pair, "ar-draft", "red apple", 0)
    while live.step() is not None:
        pass
    assert passes(live) == 16  # the race's live counter and bars
    facts = metrics.summary(alone, ar)
    assert facts["nfe"] == alone.draft_nfe == 16 and facts["step_compression"] == 1.0
    assert set(viz.token_sources(alone)) == {"unverified"}
    text = race_summary(alone, ar)
    assert "the draft model alone" in text and "cost ratio c" in text and "16 passes of the draft" in text
    assert "step compression" not in text and "speedup" not in text
    title = viz.race_figure(alone, ar).layout.title.text
    assert "the draft model alone" in title


def test_the_race_summary_and_its_bars_count_the_draft_passes_alike(pair):
    """The summary's draft passes are the bar's: both count the draft's prefill, as NFE counts the target's."""
    from specviz import viz
    from specviz.ui.race import race_summary

    trace, ar = run(pair, "cspd", "red apple", 0, params={"gamma": 4}), run(pair, "ar", "red apple", 0)
    assert f" of the target and {trace.draft_nfe} of the draft" in race_summary(trace, ar)
    bars = [bar for bar in viz.race_figure(trace, ar).data if bar.name == "draft model passes"]
    assert list(bars[0].text) == [str(trace.draft_nfe)]


def test_the_drafts_view_names_each_fate_and_writes_each_ratio_under_its_bar(pair):
    """A rejected draft's ratio is often too small to see as a bar: its value is written under it, and the
    legend names every colour on screen, the hatched discarded drafts included."""
    from specviz import viz
    from specviz.viz.continuous import ratio_label
    from specviz.viz.progress import SOURCE_COLOUR_NAMES, sources_key

    trace = run(pair, "cspd", "red apple", 0, params={"gamma": 4})
    j = next(j for j, it in enumerate(trace.iterations) if "rejected" in it.fate)
    step = trace.iterations[j]
    bars = [bar for bar in viz.ratio_bars_figure(trace, j).data if bar.type == "bar"]
    fates = [fate for fate in ("accepted", "rejected", "discarded") if fate in step.fate]
    assert [bar.name.split(" ")[0] for bar in bars] == fates
    for bar in bars:
        assert [step.fate[k] for k in bar.x] == [bar.name.split(" ")[0]] * len(bar.x)
        assert bar.marker.pattern.shape == ("/" if bar.name.startswith("discarded") else "")
    axis = viz.ratio_bars_figure(trace, j).layout.xaxis
    assert list(axis.ticktext) == [f"{k}<br>{ratio_label(r)}" for k, r in enumerate(step.ratio)]
    labels = [ratio_label(r) for r in (1.0, 0.996, 0.7249, 0.01, 0.0099, 1e-30)]
    assert labels == ["1", "1", "0.72", "0.01", "<0.01", "<0.01"]
    title = viz.trajectory_figure(trace, j).layout.title.text
    assert "the same noise at each step" in title and title.count("<br>") == 1  # two lines across the page
    # the race's map key names only the sources on the map
    sources = set(viz.token_sources(trace))
    key = sources_key(sources)
    assert {source for source, colour in SOURCE_COLOUR_NAMES.items() if f"{colour}: " in key} == sources - {"pending"}


def test_a_long_run_draws_its_passes_as_touching_bars(pair, monkeypatch):
    from specviz import viz
    from specviz.viz import figures

    trace = run(pair, "cspd", "red apple", 0, params={"gamma": 4})
    short = viz.accepted_length_figure(trace)
    assert short.data[1].width == 0.5 and short.layout.bargap is None
    monkeypatch.setattr(figures, "LONG_RUN", len(trace.iterations) - 1)
    long = viz.accepted_length_figure(trace)
    assert long.data[1].width is None and long.layout.bargap == 0


def test_the_methods_of_one_kind_of_token_refuse_the_other(pair, tiny):
    with pytest.raises(UnsupportedMethod, match="continuous tokens"):
        run(pair, "sjd", "red apple", 0)
    with pytest.raises(UnsupportedMethod, match="continuous-token draft/target pair"):
        run(tiny, "cspd", "red apple", 0)
    with pytest.raises(SettingsError, match="top-k"):
        run(pair, "ar", "red apple", 0, SamplingSettings(top_k=5))


def test_malformed_continuous_records_are_refused(pair):
    trace = run(pair, "cspd", "red apple", 0, params={"gamma": 3})
    data = trace.model_dump()
    data["vectors"] = data["vectors"][:-1]
    with pytest.raises(TraceError, match="vectors"):
        Trace.from_json(json.dumps(data))
    data = trace.model_dump()
    drafted = next(it for it in data["iterations"] if it["fate"])
    drafted["fate"] = ["discarded"] * len(drafted["fate"])
    with pytest.raises(TraceError, match="fate"):
        Trace.from_json(json.dumps(data))


def test_missing_or_mismatched_weights_say_what_is_wrong(tmp_path):
    with pytest.raises(ModelUnavailable, match="missing"):
        TinyContinuousModel.load(tmp_path)


# Proof by measurement on the continuous toy (specviz.measure.continuous_lossless): 2,000 sequences per side.


def test_a_broken_resampling_is_detected(monkeypatch):
    """Keeping the first target proposal after a rejection, instead of a draw of the residual."""
    monkeypatch.setattr(cspd_exact, "first_accepted", lambda propose, cap, generator: (propose(1)[0][0], 1, False))
    toy = ContinuousToy()
    produced, _ = method_samples(toy, "cspd-exact", {}, 2000, torch.Generator().manual_seed(0))
    reference = toy.target_samples(2000, torch.Generator().manual_seed(1))
    _, p_value = energy_test(produced, reference, torch.Generator().manual_seed(2))
    assert p_value < 1e-3


def test_one_step_of_cspd_exact_on_the_shipped_pair_matches_the_target():
    """The trained heads themselves: a step at a background cell, repeated 1,000 times (acceptance about 0.13)."""
    from specviz.measure.continuous_lossless import token_check

    report = token_check(TinyContinuousModel.load(), "cspd-exact", "red apple", 3, samples=1000)
    assert report.matches and report.acceptance > 0.03, report.summary()


def test_a_session_that_keeps_rejected_drafts_in_its_cache_is_caught(monkeypatch):
    """The toy's sessions read their prefix from a cache, as a KV cache model does: one never cropped
    conditions on rejected drafts, and its prefix runs past the sequence's end."""
    from specviz.models.toys.continuous import ToySession

    monkeypatch.setattr(ToySession, "_crop", lambda self, length: None)
    with pytest.raises(IndexError):
        method_samples(ContinuousToy(), "cspd-exact", {}, 20, torch.Generator().manual_seed(0))


def test_the_app_shows_a_continuous_run_with_its_own_views(pair):
    from specviz import viz
    from specviz.ui import controls, inspection

    assert controls.methods_for("tiny-continuous") == ["ar-draft", "cspd", "cspd-exact"]
    assert "cspd" not in controls.methods_for("tiny") and "sjd" in controls.methods_for("tiny")
    trace = run(pair, "cspd", "red apple", 0, params={"gamma": 3})
    j = metrics.opening_iteration(trace)
    accepted = {k: (it.fate.count("accepted"), bool(it.fate)) for k, it in enumerate(trace.iterations)}
    band = metrics.passes_in_picture(trace)  # once a quarter of the picture is drawn
    assert j == max(band, key=lambda k: (*accepted[k], -k))  # the most drafts accepted, else the first tested
    assert trace.iterations[j].fate  # not a pre-filled token
    views = inspection.iteration_views({"trace": trace}, j, False, False)
    bars, paths = views["window_plot"], views["depth_plot"]
    assert bars["label"] == inspection.CONTINUOUS_LABELS["iteration"] and paths["visible"]
    assert "acceptance" in bars["value"].layout.title.text or "accepted" in bars["value"].layout.title.text
    wide = inspection.iteration_views({"trace": trace}, j, False, False, wide=True)["window_plot"]  # the projector's
    assert wide["value"].layout.height < bars["value"].layout.height
    assert [list(t.y) for t in wide["value"].data] == [list(t.y) for t in bars["value"].data]
    overview = inspection.overview_figures({"trace": trace}, "run_length", False, True)
    sources, by_step, versus = overview["map_plot"], overview["changed_plot"], overview["race_plot"]
    shapes, contrast = overview["shape_plot"], overview["contrast_image"]
    assert not contrast["visible"]  # no run with pre-filling switched yet
    assert by_step["label"] == inspection.CONTINUOUS_LABELS["by_step"] and not shapes["visible"]
    assert sources["label"] == inspection.CONTINUOUS_LABELS["sources"]
    assert "where each token came from" in sources["value"].layout.title.text.replace("<br>", " ")
    assert "without an AR run" in versus.layout.annotations[0].text.replace("<br>", " ")
    assert {s for s in viz.token_sources(trace)} <= {"alone", "draft", "resampled", "capped", "target"}
    overlay = viz.pass_overlay(pair.decode(trace.vectors).resize((48, 48)), trace, j)
    assert overlay.size == (48, 48)


def test_a_discrete_run_in_a_continuous_view_says_why_it_is_empty(tiny):
    from specviz import viz

    trace = run(tiny, "sjd", "red apple", 0)
    for figure in (viz.token_source_figure(trace), viz.ratio_bars_figure(trace, 0), viz.trajectory_figure(trace, 0)):
        assert "continuous-token pair" in figure.layout.annotations[0].text.replace("<br>", " ")


def test_the_cspd_sweep_measures_alpha_passes_and_the_cost_ratio(pair):
    from specviz.measure.bench_continuous import predicted_speedup, sweep

    report = sweep(pair, ["red apple"], [0], pair.default_sampling, [2, 4], [0.0, 0.15], cost_rounds=2)
    assert [(r.method, r.gamma, r.prefill) for r in report.rows][:2] == [("cspd", 2, 0.0), ("cspd", 2, 0.15)]
    assert len(report.rows) == 8 and report.cost_ratio > 0 and "medians of 2 interleaved rounds" in report.markdown()
    for row in report.rows:
        assert 0 <= row.alpha <= 1 and row.draft_passes >= 1 and row.target_passes <= 16 + 1  # the prefill
        assert (row.log_sigma is None) == (row.method == "cspd-exact")
    assert "| cspd-exact | 4 | 15% |" in report.markdown()
    assert predicted_speedup(0.0, 4, 0.25) == pytest.approx(0.5)  # nothing accepted: gamma c + 1 = 2 passes' cost


def test_run_writes_the_image_and_trace_of_a_continuous_method(tmp_path, capsys):
    from specviz.cli import main

    assert main(["run", "--model", "tiny-continuous", "--method", "cspd", "--gamma", "4", "--prompt", "sun",
                 "--out", str(tmp_path)]) == 0  # fmt: skip
    line = capsys.readouterr().out
    assert "method=cspd (close to exact, measured)" in line and "draft_nfe=" in line and "alpha=" in line
    trace = Trace.load(tmp_path / "trace.json")
    assert trace.continuous and len(trace.vectors) == 256 and (tmp_path / "image.png").is_file()
    assert (
        main(["run", "--model", "tiny-continuous", "--method", "sjd", "--prompt", "sun", "--out", str(tmp_path / "b")])
        == 2
    )
    assert "continuous tokens" in capsys.readouterr().err


def test_inspect_adds_the_same_run_with_pre_filling_switched(pair, monkeypatch):
    """The paper's figure 11 in the app: a second run of the same method, prompt and seed with
    pre-filling off (or on), drawn beside the first in acceptance by generation step."""
    from specviz.ui import inspection

    trace = run(pair, "cspd", "red apple", 0, params={"gamma": 3, "prefill": 0.25})
    assert inspection.contrast_params(trace)["prefill"] == 0.0
    assert inspection.contrast_label({"trace": trace})["visible"]
    monkeypatch.setattr(inspection, "get_model", lambda name: pair)
    runs = inspection.with_contrast({"trace": trace})
    second = runs["contrast"][0]
    assert (second.method, second.seed, second.params["prefill"]) == ("cspd", 0, 0.0)
    assert second.iterations[0].fate and not trace.iterations[0].fate  # drafts from the start
    assert not inspection.contrast_label(runs)["visible"]  # added once
    monkeypatch.setattr(inspection, "decoder_for", lambda trace: pair)  # the random pair decodes its own grid
    overview = inspection.overview_figures(runs, "run_length", False, False)
    by_step, contrast = overview["changed_plot"], overview["contrast_image"]
    assert contrast["visible"] and contrast["label"] == "cspd, pre-fill 0%: its image"  # the second run's picture
    assert contrast["value"].size == inspection.picture(pair, second.vectors, "", None).size
    alphas = [metrics.draft_acceptance(t.iterations) for t in (trace, second)]
    names = [f"cspd, pre-fill 25%: alpha {alphas[0]:.2f}", f"cspd, pre-fill 0%: alpha {alphas[1]:.2f}"]
    assert [line.name for line in by_step["value"].data] == names
    assert inspection.contrast_params(run(pair, "ar", "red apple", 0)) is None  # nothing to switch
