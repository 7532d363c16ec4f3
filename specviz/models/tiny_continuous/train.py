"""The old name of `python -m specviz.training.tiny_continuous`, kept so that written commands still run."""

import runpy
import sys

if __name__ == "__main__":
    print("specviz.models.tiny_continuous.train moved to specviz.training.tiny_continuous", file=sys.stderr)
    runpy.run_module("specviz.training.tiny_continuous", run_name="__main__", alter_sys=True)
