"""`python -m specviz gpu-report` end to end without CUDA: the reduced plan, so the command a lent GPU runs
is known to work before the GPU minutes are spent."""

import json

import pytest

from specviz.cli import main
from specviz.decoding.registry import METHODS
from specviz.gpu_report import plan_for


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[dict, str, str]:
    out = tmp_path_factory.mktemp("gpu") / "report"
    assert main(["gpu-report", "--out", str(out), "--device", "cpu"]) == 0
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text(), str(out)


def test_the_reduced_report_counts_host_reads_of_every_discrete_method(report):
    data, page, _ = report
    reads = {row["method"]: row["reads_per_pass"] for row in data["host_reads"] if row["model"] == "tiny"}
    assert set(reads) == {name for name, method in METHODS.items() if method.iterate is not None}
    assert reads.pop("ar") == 1.0  # its token, read for the record
    assert set(reads.values()) == {0.0}  # window and tree passes: none besides the record's one copy
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
    assert pair == {"ar", "cspd"}
    assert set(data["seconds"]) == {f"{m}: {s}" for m in plan.models for s in ("pass cost", "bench")} | {
        "tiny: host reads",
        "CUDA tests",
    }
    assert "## Every method against AR" in page and "| sjd | yes |" in page


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
