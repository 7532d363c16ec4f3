"""The toy models `check-lossless` samples, by name, with what each is for.

Light (no torch): the command line offers them in its help; `specviz.measure.lossless.TOYS` builds them
from `discrete.py` and `continuous.py` here.
"""

TOY_DESCRIPTIONS = {
    "short": "2x2 grid, 4 tokens",
    "long": "2x3 grid whose drafts are carried through several passes",
    "llama": "a real transformers model and cache at temperature 0.8, top-p 0.9",
}
