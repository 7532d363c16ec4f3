"""The package's folders are its layers: each imports only from the folders below it, and the core is light."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specviz"
# what each part of the package may import (besides itself), from the faces down to the core
MAY_IMPORT = {
    "__main__": {"cli"},
    "cli": {"viz", "measure", "metrics", "decoding", "trace", "models", "core"},
    "ui": {"viz", "measure", "metrics", "decoding", "trace", "models", "core"},
    "stage": {"measure", "decoding", "models", "core"},
    "measure": {"viz", "metrics", "decoding", "trace", "models", "core"},
    "viz": {"metrics", "trace", "core"},
    "metrics": {"trace", "core"},
    "training": {"models", "core"},
    "decoding": {"trace", "models", "core"},
    "trace": {"core"},
    "models": {"core"},
    "core": set(),
}
HEAVY = ("torch", "transformers", "gradio", "matplotlib", "plotly", "numpy", "PIL", "scipy")


def _part(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def _imports() -> list[tuple[str, str, str]]:
    """(importing file, its part, imported specviz module) for every import in the package, lazy ones included."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        part = _part(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            where = str(path.relative_to(PACKAGE.parent))
            found += [(where, part, name) for name in names if name.startswith("specviz.")]
    return found


def test_every_part_of_the_package_has_a_place_among_the_layers():
    parts = {_part(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)) for path in PACKAGE.rglob("*.py")}
    assert parts - {"__init__"} <= set(MAY_IMPORT), "a new top-level module or folder needs its place in MAY_IMPORT"


def test_imports_run_only_down_the_layers():
    upward = [
        f"{path} imports {name}"
        for path, part, name in _imports()
        if _part(name) != part and _part(name) not in MAY_IMPORT[part]
    ]
    assert not upward, "\n".join(upward)


def test_the_layers_themselves_run_one_way():
    """No two parts may import each other, however indirectly: the allowed imports form no circle."""
    seen: dict[str, set[str]] = {}

    def below(part: str, path: tuple[str, ...]) -> set[str]:
        assert part not in path, " -> ".join((*path, part))
        if part not in seen:
            seen[part] = set(MAY_IMPORT[part]).union(*(below(lower, (*path, part)) for lower in MAY_IMPORT[part]))
        return seen[part]

    for part in MAY_IMPORT:
        below(part, ())


@pytest.mark.parametrize("module", sorted(p.stem for p in (PACKAGE / "core").glob("*.py") if p.stem != "__init__"))
def test_the_core_loads_nothing_heavy(module):
    """The command line builds its help from the core alone, so importing any of it must stay light."""
    code = f"import sys, specviz.core.{module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert not loaded, f"specviz.core.{module} imports {loaded}"
