"""`check-model`: every family's random-weight model passes against its own reference, and a model whose
cached passes drift from the network's is caught."""

import pytest
import torch
from model_zoo import FAMILIES

from specviz import cli
from specviz.measure.check_model import check_model, positions_for, report_lines


@pytest.fixture(scope="module", params=[name for name in FAMILIES if name != "tiny"])
def family_model(request):
    return FAMILIES[request.param].build()


def test_every_family_passes_against_its_reference(family_model):
    check = check_model(family_model, FAMILIES[family_model.name].prompt, seed=1, shown=6)
    lines = report_lines(family_model, check)
    assert check.passed, "\n".join(lines)
    assert lines[-1] == "PASSED" and check.largest_tv <= check.tolerance
    count = positions_for(family_model, 6)
    assert [len(comparison.ours) for comparison in check.comparisons[:2]] == [count, count]
    if family_model.name in ("janus-pro", "emu3"):  # the families with transformers' generate()
        assert check.comparisons[-1].name == "greedy vs transformers generate()"
        assert "generate(), greedy" in check.images
    if hasattr(family_model, "prompt_ids"):
        assert check.prompt_ids == family_model.prompt_ids(FAMILIES[family_model.name].prompt)[0].tolist()
    if family_model.name == "llamagen-t2i":  # the caption as T5 reads it, cleaned as the release cleans it
        assert "of the cleaned caption 'a red apple'" in check.prompt_ids


class DriftingSession:
    """A session whose passes tilt the logits toward the higher codes: what a cache or mask slip looks like."""

    def __init__(self, session):
        self._session = session

    def __getattr__(self, name):
        return getattr(self._session, name)

    def forward(self, tokens, *args, **kwargs):
        logits = self._session.forward(tokens, *args, **kwargs)
        return logits + torch.linspace(0, 4, logits.shape[-1])


def drifting(model):
    session = model.session
    model.session = lambda *args, **kwargs: DriftingSession(session(*args, **kwargs))
    return model


def test_a_drifting_cache_fails_with_its_first_mismatch():
    model = drifting(FAMILIES["llamagen-c2i"].build())
    check = check_model(model, "3", seed=0, shown=12)
    assert not check.passed and check.largest_tv > check.tolerance
    assert any(comparison.first_mismatch is not None for comparison in check.comparisons)
    lines = report_lines(model, check)
    assert lines[-1].startswith("FAILED") and any("MISMATCH at sequence position" in line for line in lines)


def test_the_command_prints_both_sides_writes_the_grid_and_exits_by_the_verdict(tmp_path, monkeypatch, capsys):
    grid = tmp_path / "grid.png"
    assert cli.main(["check-model", "--model", "tiny", "--prompt", "red apple", "--grid", str(grid)]) == 0
    out = capsys.readouterr().out
    assert "greedy vs uncached passes: match" in out and "  reference [" in out and out.count("  ours      [") == 3
    assert grid.is_file() and grid.stat().st_size > 0

    # a drifting model fails (a family's random-weight model: the shipped tiny's check takes 20 s more)
    broken = drifting(FAMILIES["llamagen-c2i"].build())
    monkeypatch.setattr(cli, "load_model", lambda *args, **kwargs: broken)
    prompt = FAMILIES["llamagen-c2i"].prompt
    assert cli.main(["check-model", "--model", "tiny", "--prompt", prompt, "--grid", str(tmp_path / "broken.png")]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_a_model_with_no_reference_is_refused_in_one_line(monkeypatch, capsys):
    from specviz.models.toys.discrete import TOYS

    toy = TOYS["short"]()
    monkeypatch.setattr(cli, "load_model", lambda *args, **kwargs: toy)
    assert cli.main(["check-model", "--model", "tiny", "--grid", "unused.png"]) == 2
    assert "has no uncached reference" in capsys.readouterr().err


def test_the_reference_sees_what_the_session_sees():
    """The uncached reference and a fresh session agree on the prefill's distribution (a sanity check that
    the reference is not a copy of the session: it runs the network on the whole sequence)."""
    from specviz.models.reference import uncached_logits

    model = FAMILIES["janus-pro"].build()
    session = model.session("a red apple", 5.0)
    torch.testing.assert_close(
        uncached_logits(model, "a red apple", 5.0, torch.tensor([], dtype=torch.long))[0],
        session.next_logits,
        atol=1e-4,
        rtol=0,
    )


def test_an_unknown_model_is_refused_before_it_names_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check-model", "--model", "../../elsewhere"]) == 2
    assert "elsewhere" in capsys.readouterr().err and not list(tmp_path.iterdir())  # no folder made for it
