"""`scripts/grid_passes.py` counts each schedule's passes on a released grid (docs/methods.md, PJD measured):
with one image code every draft passes, so the counts are the schedules' own, known in closed form."""

import dataclasses
import runpy
from pathlib import Path

from specviz.measure.shapes import ShapeModel, release_shapes

SCRIPT = Path(__file__).parents[1] / "scripts" / "grid_passes.py"


def test_the_floor_on_lumina_mgpts_grid_is_each_schedules_own():
    script = runpy.run_path(str(SCRIPT))
    shape = release_shapes()["lumina-mgpt-7b"].scaled(0.01, keep_grid=True)
    assert (shape.rows, shape.cols, shape.image_codes) == (48, 48, 81)
    model = ShapeModel(dataclasses.replace(shape, image_codes=1))
    assert model.geometry.seq_len == 48 * 49  # a row-end token after every row
    zipar = script["count"](model, "zipar", [0])
    assert zipar["passes"] == [47 * 8 + 49]  # (rows - 1) s + cols, the row end included
    sjd = script["count"](model, "sjd", [0])
    assert sjd["passes"] == [140] and sjd["rows"] == 1  # W + 1 = 17 tokens a pass
    pjd = script["count"](model, "pjd", [0])
    assert pjd["passes"][0] < sjd["passes"][0] and pjd["rows"] > 1
