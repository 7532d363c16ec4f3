"""The old name of `python -m specviz.training.tiny`, kept so that written commands still run."""

import runpy
import sys

if __name__ == "__main__":
    print("specviz.models.tiny.train moved to specviz.training.tiny", file=sys.stderr)
    runpy.run_module("specviz.training.tiny", run_name="__main__", alter_sys=True)
