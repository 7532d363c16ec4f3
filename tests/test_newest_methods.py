"""The newest methods (issue 32: SJD-PAC, LANTERN++, ZipAR) on every family's test model (model_zoo.py):
each completes a valid image that decodes, through the family's real classes, masks and layout."""

import pytest
from model_zoo import FAMILIES

from specviz.decoding import run
from specviz.models.protocol import decode_in_order
from specviz.trace import Trace

NEWEST = {"sjd-pac": {"window": 6}, "lantern++": {"neighbours": 4}, "zipar": {"window_size": 2}}


@pytest.fixture(scope="module", params=[name for name in FAMILIES if name != "tiny"])
def family_model(request):
    family = FAMILIES[request.param]
    return family, family.build()


@pytest.mark.parametrize("method", list(NEWEST))
def test_the_newest_methods_complete_an_image_on_every_family(family_model, method):
    family, model = family_model
    trace = run(model, method, family.prompt, 1, params=NEWEST[method])
    assert trace.kind == {"sjd-pac": "tree", "lantern++": "tree", "zipar": "rows"}[method]
    assert len(trace.tokens) == model.geometry.seq_len and trace.nfe == len(trace.iterations)
    assert Trace.from_json(trace.to_json()) == trace
    assert decode_in_order(model, trace.tokens, trace.geometry.order).size
