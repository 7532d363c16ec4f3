"""The old name of `python -m specviz.training.tiny_head`, kept so that written commands still run."""

import runpy
import sys

if __name__ == "__main__":
    print("specviz.models.tiny.train_head moved to specviz.training.tiny_head", file=sys.stderr)
    runpy.run_module("specviz.training.tiny_head", run_name="__main__", alter_sys=True)
