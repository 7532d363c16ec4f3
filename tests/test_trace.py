import json
from pathlib import Path

import pytest

from specviz.core.params import WindowParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.trace import MAX_TRACE_BYTES, TRACE_VERSION, VERSION_3_GROUP, Trace, TraceError

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).parents[1] / "specviz" / "data" / "examples"


@pytest.fixture(scope="module")
def trace(tiny) -> Trace:
    return run(tiny, "ar", "sun", seed=3)


@pytest.fixture
def data(trace) -> dict:
    return json.loads(trace.to_json())


@pytest.fixture
def window_data() -> dict:
    """A shipped SJD run: a token pass, then window passes."""
    return json.loads((EXAMPLES / "red-apple-sjd.json").read_text())


def test_round_trip(trace, tmp_path):
    path = tmp_path / "trace.json"
    trace.save(path)
    assert Trace.load(path) == trace


def _rejected(data_or_text, message):
    text = data_or_text if isinstance(data_or_text, (str, bytes)) else json.dumps(data_or_text)
    with pytest.raises(TraceError, match=message):
        Trace.from_json(text)


def test_bad_json():
    _rejected("{not json", "not valid JSON")
    _rejected("", "not valid JSON")


def test_pickle_bytes_are_not_unpickled():
    import pickle

    _rejected(pickle.dumps({"version": 1}), "not valid JSON")


def test_wrong_version(data):
    data["version"] = 99
    _rejected(data, "unsupported trace version 99")


def test_missing_field(data):
    del data["tokens"]
    _rejected(data, "tokens: Field required")


def test_unknown_field(data):
    data["__class__"] = "os.system"
    _rejected(data, "Extra inputs are not permitted")


def test_wrong_shapes(window_data):
    window_data["iterations"][1]["p_new"] = [0.5, 0.5]
    _rejected(window_data, "one entry per draft")


def test_token_out_of_vocabulary(data):
    data["tokens"][0] = 5000
    _rejected(data, "token 5000 at position 0 must be an image token below 1024")


def test_probability_out_of_range(window_data):
    window_data["iterations"][1]["p_old"][0] = 1.5
    _rejected(window_data, "less than or equal to 1")


def test_committed_tokens_must_agree(data):
    data["iterations"][1]["committed"] = [data["tokens"][1] ^ 1]
    _rejected(data, "disagree with the final tokens")


def test_huge_arrays(data):
    data["tokens"] = [0] * 100_000
    _rejected(data, "at most 65536")


def test_grid_and_layout_disagree(data):
    data["geometry"]["rows"] = 17
    _rejected(data, "layout has 256 image cells")


def test_oversized_file(tmp_path):
    path = tmp_path / "big.json"
    with path.open("wb") as f:
        f.truncate(MAX_TRACE_BYTES + 1)
    with pytest.raises(TraceError, match="limit"):
        Trace.load(path)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="cannot read trace"):
        Trace.load(tmp_path / "nope.json")


@pytest.mark.parametrize("name", ["../../../../tmp/x/PWNED", "/tmp/x/PWNED", "a\x00b", "a/" * 40, "$\\frac{$", "", "é"])
@pytest.mark.parametrize("field", ["method", "model"])
def test_names_are_registry_names(data, field, name):
    """A trace's model and method become file names and titles: an upload naming a path is refused."""
    data[field] = name
    with pytest.raises(TraceError, match=f"{field}: a registry name") as refused:
        Trace.from_json(json.dumps(data))
    assert len(str(refused.value)) < 200


def test_a_key_given_twice_is_refused(data):
    """Two readers could take the first or the last of two `method` keys: the file is ambiguous."""
    text = json.dumps(data).replace('"method": "ar"', '"method": "ar", "method": "sjd"', 1)
    _rejected(text, "the key 'method' appears twice in one object")


def test_numbers_beyond_a_float_are_refused(data):
    data["seconds"] = 12345.678
    _rejected(json.dumps(data).replace("12345.678", "1e999"), "'1e999' is beyond the numbers a trace may hold")


def test_a_run_has_at_least_its_prefill_pass(data):
    data["nfe"] = 0
    _rejected(data, "nfe: Input should be greater than or equal to 1")


@pytest.mark.parametrize(
    "text, message",
    [  # every kind of value counts, and lists and objects have their own, smaller budget
        ("[" + ",".join(["null"] * 4_000_000) + "]", "more than 4000000 values"),
        ('["' + '","'.join(["a"] * 4_000_000) + '"]', "more than 4000000 values"),
        ("[" + ",".join(["{}"] * 1_000_001) + "]", "more than 1000000 lists and objects"),
        ("[" + ",".join(["[]"] * 1_000_001) + "]", "more than 1000000 lists and objects"),
    ],
)
def test_the_value_budget_is_counted_before_parsing(text, message):
    _rejected(text, message)


def test_a_version_1_count_is_not_expanded_beyond_its_window():
    """Version 1 kept an `accepted` count that conversion expands into fates: 10**12 of them would fill
    memory from a 200 KB upload. A count beyond the iteration's drafts is left for validation to refuse."""
    data = json.loads((DATA / "trace-v1-scd-mc.json").read_text())
    data["iterations"][1]["accepted"] = 10**12
    _rejected(data, "iterations.1.window.uniform: Field required")  # left unconverted, and refused


@pytest.mark.parametrize("where", ["version", "params-key", "prompt"])
def test_a_refusal_quotes_a_short_prefix_of_a_huge_value(data, where):
    huge = "x" * 5_000_000
    if where == "version":
        data["version"] = huge
    elif where == "params-key":
        data["params"] = {huge: 1}
    else:
        data["prompt"] = huge
    with pytest.raises(TraceError) as refused:
        Trace.from_json(json.dumps(data))
    assert len(str(refused.value)) < 400, str(refused.value)[:400]


@pytest.mark.parametrize("window", ["16", 10**9, 2.5, True])
def test_a_known_methods_parameters_are_checked_by_its_parameter_class(window):
    """An upload whose SJD window is the text "16" loads, then breaks every view that counts on an int."""
    data = json.loads((EXAMPLES / "red-apple-sjd.json").read_text())
    data["params"]["window"] = window
    _rejected(data, "params: window must be an integer from 1 to 128")


def test_a_loaded_trace_keeps_its_parameters_and_settings_typed(window_data):
    """Readers take the window and the sampling from typed values, rebuilt once when the trace loads."""
    trace = Trace.from_json(json.dumps(window_data))
    assert isinstance(trace.parameters, WindowParameters) and trace.parameters.window == window_data["params"]["window"]
    assert trace.sampling_settings == SamplingSettings(**window_data["sampling"])


@pytest.mark.parametrize("field, value", [("temperature", 100.5), ("guidance_scale", 51.0)])
def test_a_trace_meets_the_bounds_a_new_run_meets(window_data, field, value):
    """A loaded trace races again with its own settings, so it may hold no setting a run would refuse."""
    window_data["sampling"][field] = value
    _rejected(window_data, "sampling: .* must be between")


@pytest.mark.parametrize(
    "method, kinds",
    [("ar", {"token"}), ("sjd", {"token", "window"}), ("eagle2", {"token", "tree"}), ("cspd", {"continuous"})],
)
def test_a_version_2_trace_loads_as_records_of_its_kind(method, kinds):
    """Version 2 held every kind of pass in one record; each becomes the record of its kind, with every
    number it had (a continuous step's fields moved up into its record)."""
    old = json.loads((DATA / f"trace-v2-{method}.json").read_text())
    trace = Trace.from_json(json.dumps(old))
    assert trace.version == TRACE_VERSION == 4 and {it.kind for it in trace.iterations} == kinds
    assert Trace.from_json(trace.to_json()) == trace
    for before, after in zip(old["iterations"], trace.iterations, strict=True):
        step = before.pop("continuous")
        fields = {**before, **(step or {})}
        mine = after.model_dump(mode="json")
        group = mine.pop("group", None) or {}  # version 4 holds a relaxed test's fields in a part of their own
        mine.update({old: group.get(new) for old, new in VERSION_3_GROUP.items()} if after.kind == "window" else {})
        assert mine.pop("reused", None) is None  # SJD++'s reuse marks, a later optional field
        assert all(fields[name] == value for name, value in mine.items() if name != "kind")
        dropped = {name: value for name, value in fields.items() if name not in mine}
        assert all(value in (None, []) for value in dropped.values()), dropped  # only empty fields of other kinds


@pytest.mark.parametrize("method", ["lantern", "sjd"])
def test_a_version_3_trace_loads_with_a_relaxed_test_in_its_own_part(tiny, method):
    """Version 3 kept LANTERN's and GSD's group fields in every window record (empty for exact methods)."""
    trace = run(tiny, method, "sun", seed=1, params={"window": 8})
    old = json.loads(trace.to_json())
    for it in old["iterations"]:
        if it["kind"] == "window":
            group = it.pop("group") or {}
            it.update({name: group.get(part) for name, part in VERSION_3_GROUP.items()})
    old["version"] = 3
    assert Trace.from_json(json.dumps(old)) == trace
    windows = [it for it in trace.iterations if it.kind == "window"]
    assert all((it.group is not None) == (method == "lantern") for it in windows)


def test_a_record_holds_only_its_own_kinds_fields(window_data):
    window_data["iterations"][0]["drafts"] = [1]  # the token pass
    _rejected(window_data, "iterations.0.token.drafts: Extra inputs are not permitted")


def test_a_record_of_an_unknown_kind_is_refused(window_data):
    window_data["iterations"][1]["kind"] = "lookahead"
    _rejected(window_data, "does not match any of the expected tags")


def test_a_run_does_not_mix_kinds_of_passes():
    data = json.loads((DATA / "trace-v2-eagle2.json").read_text())
    window = json.loads((DATA / "trace-v2-sjd.json").read_text())["iterations"][1]
    data["iterations"][1:2] = [window]
    _rejected(data, "a run's passes are of one kind, not tree and window")
