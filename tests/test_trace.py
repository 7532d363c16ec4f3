import json

import pytest

from specviz.decoding import run
from specviz.trace import MAX_TRACE_BYTES, Trace, TraceError


@pytest.fixture(scope="module")
def trace(tiny) -> Trace:
    return run(tiny, "ar", "sun", seed=3)


@pytest.fixture
def data(trace) -> dict:
    return json.loads(trace.to_json())


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


def test_wrong_shapes(data):
    data["iterations"][0]["p_new"] = [0.5, 0.5]
    _rejected(data, "one entry per draft")


def test_token_out_of_vocabulary(data):
    data["tokens"][0] = 5000
    _rejected(data, "token 5000 at position 0 must be an image token below 1024")


def test_probability_out_of_range(data):
    it = data["iterations"][0]
    it.update(drafts=[1], p_old=[1.5], p_new=[0.5], ratio=[0.5])
    _rejected(data, "less than or equal to 1")


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
