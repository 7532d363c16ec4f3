"""A method from outside: an installed package declares it under the entry-point group `specviz.methods`, and it
joins the catalogue, the command line and its own exactness test without a fork."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PACKAGE = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "specviz-sjd-twin"
        version = "0.1.0"

        [project.entry-points."specviz.methods"]
        sjd-twin = "sjd_twin:METHODS"

        [tool.setuptools]
        packages = ["sjd_twin"]
    """,
    # light, as the catalogue must stay: the entry names its loop by module
    "sjd_twin/__init__.py": """
        from specviz.core.catalogue import MethodInfo
        from specviz.core.params import WindowParameters

        METHODS = [
            MethodInfo(
                "sjd-twin", WindowParameters, True, "SJD's rule from a package of its own",
                discrete="sjd_twin.rule:iterate",
            ),
            MethodInfo("sjd", WindowParameters, True, "takes a built-in name", discrete="sjd_twin.rule:iterate"),
        ]
    """,
    "sjd_twin/rule.py": """
        from specviz.decoding.sampling import sample
        from specviz.decoding.window import WindowVerdict, run_window


        def verify(step):
            ratio = step.speculative_ratio
            uniform, accepted = step.accept(ratio)
            return WindowVerdict(accepted=accepted, head=step.exact_head(accepted),
                                 next_drafts=sample(step.p[1:], step.generator), ratio=ratio, uniform=uniform)


        def iterate(session, sampling, generator, params):
            return run_window(session, sampling, generator, params, verify)
    """,
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The package built and installed into a folder of its own; the environment that sees it."""
    source, target = tmp_path_factory.mktemp("sjd-twin"), tmp_path_factory.mktemp("site")
    for name, text in PACKAGE.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(textwrap.dedent(text).lstrip())
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*install, "--target", str(target), str(source)], check=True, capture_output=True, cwd=source)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)


def test_an_installed_method_joins_the_catalogue_and_runs(installed):
    done = _python(
        "from specviz.core.catalogue import CATALOGUE\n"
        "from specviz.decoding import run\n"
        "from specviz.models.toys.discrete import TOYS\n"
        "toy = TOYS['short']()\n"
        "trace = run(toy, 'sjd-twin', 'x', 3, toy.default_sampling, {'window': toy.window})\n"
        "print(list(CATALOGUE).count('sjd-twin'), trace.method, trace.lossless, len(trace.tokens))",
        installed,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "sjd-twin", "True", "6"]
    assert "left out: the method name 'sjd' is taken" in done.stderr  # the clash is named, the rest still runs


def test_the_command_line_offers_it(installed):
    done = subprocess.run(
        [sys.executable, "-m", "specviz", "run", "--help"], env=installed, capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0 and "sjd-twin" in done.stdout


def test_its_exactness_test_appears_by_itself_and_passes(installed):
    """The generated tests of tests/test_lossless.py, collected where the package is installed."""
    selected = "sjd-twin and (every_lossless_entry_samples_exact_ar_on_every_toy and short or greedy)"
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*pytest_command, "tests/test_lossless.py", "-k", selected],
        env=installed,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert "2 passed" in done.stdout


def test_a_package_that_cannot_load_leaves_the_rest_running(tmp_path, installed):
    broken = tmp_path / "broken"
    (broken / "broken_method-0.1.dist-info").mkdir(parents=True)
    (broken / "broken_method-0.1.dist-info" / "METADATA").write_text("Name: broken-method\nVersion: 0.1\n")
    (broken / "broken_method-0.1.dist-info" / "entry_points.txt").write_text(
        "[specviz.methods]\nbroken = no_such_module:METHOD\n"
    )
    env = {**installed, "PYTHONPATH": os.pathsep.join([str(broken), installed["PYTHONPATH"]])}
    done = _python("from specviz.core.catalogue import CATALOGUE as C; print('sjd-twin' in C, 'sjd' in C)", env)
    assert done.returncode == 0 and done.stdout.split() == ["True", "True"]
    assert "no_such_module:METHOD could not be loaded and is left out" in done.stderr
