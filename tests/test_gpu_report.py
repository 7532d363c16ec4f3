"""`python -m specviz gpu-report` end to end without CUDA: the reduced plan, so the command a lent GPU runs
is known to work before the GPU minutes are spent."""

import json

import pytest

from specviz.cli import main
from specviz.decoding.registry import METHODS
from specviz.measure.gpu_report import plan_for

pytestmark = pytest.mark.xdist_group("gpu-report")  # one worker builds the reduced report, once


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[dict, str, str]:
    out = tmp_path_factory.mktemp("gpu") / "report"
    assert main(["gpu-report", "--out", str(out), "--device", "cpu"]) == 0
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text(), str(out)


def test_the_reduced_report_counts_host_reads_of_every_discrete_method(report):
    data, page, _ = report
    reads = {row["method"]: row["reads_per_pass"] for row in data["host_reads"] if row["model"] == "tiny"}
    assert set(reads) == {name for name, method in METHODS.items() if method.iterate is not None}
    assert set(reads.values()) == {0.0}  # every pass reads only its record (AR: its token), not counted
    assert page.startswith("# GPU report (reduced, without CUDA)") and "| tiny | sjd | 0.00 |" in page


def test_the_reduced_report_times_passes_and_benches_a_method_of_each_family(report):
    data, page, _ = report
    plan = plan_for(__import__("torch").device("cpu"))
    assert list(data["pass_cost"]) == list(data["bench"]) == list(plan.models)
    for entry in data["pass_cost"].values():
        assert [cost["tokens"] for cost in entry["costs"]] == list(plan.sizes) and entry["costs"][0]["ratio"] == 1.0
    tiny = {row["method"]: row for row in data["bench"]["tiny"]["table"]["results"]}
    assert list(tiny) == ["ar", "sjd", "eagle2"] and tiny["ar"]["mean_nfe"] == 256
    assert tiny["sjd"]["mean_nfe"] < 256 and tiny["eagle2"]["trees"]["tau"] > 1
    pair = {row["method"] for row in data["bench"]["tiny-continuous"]["table"]["results"]}
    assert pair == {"ar"}  # CSpD's bench only on a GPU: a run takes a minute on two cores
    assert list(data["seconds"]) == [
        *(f"shapes: {name}, {path} path" for path in ("fast", "plain") for name in plan.shapes),
        "tests",
        "tiny: host reads",
        "tiny: pass cost",
        "tiny: bench",
        "tiny: fast path",
        "tiny-continuous: pass cost",
        "tiny-continuous: bench",
    ]
    assert data["errors"] == {} and data["not_run"] == []
    assert "## Every method against AR" in page and "| sjd | yes |" in page


def test_the_reduced_report_times_the_fast_path_and_checks_its_distributions(report):
    data, page, _ = report
    rows = {row["method"]: row for row in data["fast_path"]["tiny"]["results"]}
    assert list(rows) == ["ar", "sjd"] and rows["ar"]["plain_speedup"] == rows["ar"]["fast_speedup"] == 1.0
    assert all(row["plain_seconds"] > 0 and row["fast_seconds"] > 0 for row in rows.values())
    assert all(row["largest_gap"] < 1e-4 for row in rows.values())  # float rounding apart (a broken path: 0.9)
    assert "## The fast path on the embedded models" in page and "| sjd |" in page.split("## The fast path")[1]


def test_the_report_refuses_a_folder_it_cannot_write(tmp_path, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert main(["gpu-report", "--out", str(blocked / "report"), "--device", "cpu"]) == 2
    assert "error:" in capsys.readouterr().err


def test_the_report_runs_the_cuda_tests_which_skip_without_a_gpu(report):
    """Without CUDA every test marked for it skips; on a GPU machine they run, and must pass."""
    import torch

    data, page, _ = report
    summary = data["tests"]["summary"]
    assert data["tests"]["returncode"] == 0 and "## Tests marked for CUDA" in page
    if torch.cuda.is_available():
        assert "passed" in summary and "failed" not in summary
    else:
        assert "skipped" in summary and "passed" not in summary


def test_the_reduced_report_measures_release_shapes_cut_down_on_both_paths(report):
    """Each shape on the fast path, then on the plain path: AR's time per token (no floor on a CPU, said so),
    every method's pass (or its refusal) and the predicted speedups on both paths."""
    data, page, _ = report
    shapes = {(entry["name"], entry["path"]): entry for entry in data["shapes"]}
    paths = [(name, path) for path in ("fast", "plain") for name in ("lumina-mgpt-7b", "llamagen-xl")]
    assert list(shapes) == paths and "## Release shapes, random weights" in page
    for path in ("fast", "plain"):
        lumina = shapes["lumina-mgpt-7b", path]
        rows = {row["method"]: row for row in lumina["methods"]}
        assert set(rows) == {"ar", "sjd", "scd-mc", "eagle2", "peanut", "sjd-pac", "pjd"}
        assert rows["ar"]["width"] == 1 < rows["sjd"]["width"] < rows["eagle2"]["width"]
        assert all(row["reads_per_pass"] == 0 and 0 <= row["outside_forward"] < 1 for row in rows.values())
        sjd = next(row for row in lumina["predicted"] if row["method"] == "sjd")
        assert sjd["latency"] == pytest.approx(sjd["steps"] * lumina["ar_ms_per_token"] / rows["sjd"]["ms"])
        assert lumina["floor_ms"] is None and lumina["floor"] == "not given: not a GPU"
        llamagen = {row["method"]: row for row in shapes["llamagen-xl", path]["methods"]}
        assert "draft_head" in llamagen["eagle2"]["refused"]  # LlamaGen's adapter has no EAGLE head
        assert next(row for row in shapes["llamagen-xl", path]["predicted"])["latency"] is None
        assert f"| llamagen-xl | {path} | eagle2 | drafter head | refused: the head drafter needs" in page
    assert "static_cache_gb" in shapes["lumina-mgpt-7b", "fast"]
    assert "static_cache_gb" not in shapes["lumina-mgpt-7b", "plain"]
    assert "Floor: not given: not a GPU." in page and "| lumina-mgpt-7b | sjd | 2.22 | 2.04x | " in page


def test_the_weight_read_floor_is_given_for_the_gpus_the_report_knows(monkeypatch):
    """An H100 SXM reads LLaMA-7B's 6.75 B bf16 parameters in 4.0 ms, an H200 in 2.8 ms; any other device's
    floor is not given, and the report says why."""
    import torch

    from specviz.measure.shapes import weight_read_floor

    cuda = torch.device("cuda")
    for name, floor, label in [("NVIDIA H100 80GB HBM3", 4.03, "H100 SXM, 3.35 TB/s"), ("NVIDIA H200", 2.81, "H200")]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device, name=name: name)
        ms, said = weight_read_floor(6.75e9, cuda)
        assert ms == pytest.approx(floor, abs=0.01) and said.startswith(label)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 PCIe")
    unknown = "not given: the memory bandwidth of NVIDIA H100 PCIe is not known here"
    assert weight_read_floor(6.75e9, cuda) == (None, unknown)


def test_the_release_shapes_have_the_releases_sizes():
    """Built on the meta device (no memory): each decoder, without its LM head, has its release's size:
    LLaMA-7B's 6.74 B with Chameleon's 65,536 or DeepSeek-LLM's 102,400 embeddings, Emu3's 8.49 B less
    its 0.76 B head, LlamaGen GPT-XL's 775 M (its paper's table) less its 21 M output layer."""
    from specviz.measure.shapes import ShapeModel, decoder_parameters, release_shapes

    expected = {"lumina-mgpt-7b": 6.75e9, "anole-7b": 6.75e9, "janus-pro-7b": 6.49e9, "emu3-8b": 7.74e9}
    expected["llamagen-xl"] = 0.775e9 - 16384 * 1280
    sizes = {name: decoder_parameters(ShapeModel(shape, "meta")) for name, shape in release_shapes().items()}
    assert sizes == pytest.approx(expected, rel=0.01)


def test_a_budget_keeps_what_was_measured_and_lists_what_was_not(tmp_path, capsys):
    """A lent GPU's minutes are few: no step starts after --minutes, the report is written after every step,
    and the steps left are named as not run."""
    out = tmp_path / "report"
    assert main(["gpu-report", "--out", str(out), "--device", "cpu", "--only", "tiny,mar", "--minutes", "0.001"]) == 0
    data = json.loads((out / "report.json").read_text())
    assert list(data["seconds"]) == ["tiny: host reads"]  # the first step starts; the budget is spent by its end
    assert data["not_run"] == ["tiny: pass cost", "tiny: bench", "tiny: fast path"]  # mar: no step in the reduced plan
    assert "## Not run: the time budget ran out" in (out / "report.md").read_text()
    assert not list(out.glob(".*.partial"))
    assert main(["gpu-report", "--out", str(tmp_path / "other"), "--device", "cpu", "--only", "gpu"]) == 2
    assert "--only takes sections from tests, tiny" in capsys.readouterr().err


def test_a_step_that_fails_is_recorded_and_the_report_goes_on(tmp_path, monkeypatch):
    from specviz.measure import gpu_report as module

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(module, "host_read_rows", broken)
    plan = module.Plan(("red apple",), (0,), 1, (1, 2), ("tiny",), ("ar",), shapes=(), mar=(), fast_prompts=0)
    report = module.gpu_report("cpu", tmp_path, plan, only=["tiny"], budget_s=None)
    failure = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert report["errors"] == {"tiny: host reads": failure}
    assert list(report["pass_cost"]) == list(report["bench"]) == ["tiny"]
    assert "tiny: host reads: `RuntimeError: CUDA error" in (tmp_path / "report.md").read_text()


def test_prompts_cuts_the_benches_to_the_plans_first_prompts(tmp_path, capsys, monkeypatch):
    """A short lease runs a whole section over fewer prompts rather than lose it to the call's limit."""
    from specviz.measure import gpu_report as module

    monkeypatch.setattr(module, "host_read_rows", lambda model, methods: [])  # the bench is what is looked at
    plan = module.Plan(("red apple", "cat face"), (0,), 1, (1,), ("tiny",), ("ar",), shapes=(), mar=(), fast_prompts=0)
    report = module.gpu_report("cpu", tmp_path, plan, only=["tiny"], prompts=1)
    assert report["plan"]["prompts"] == ("red apple",)
    assert "1 prompts x 1 seeds" in report["bench"]["tiny"]["markdown"]
    assert main(["gpu-report", "--out", str(tmp_path / "other"), "--device", "cpu", "--prompts", "0"]) == 2
    assert "--prompts must be at least 1" in capsys.readouterr().err
