"""One error convention: library code raises a OneLineError (experiments/kit/errors.py), and only
a command line's edge (its ``main``, its argument checks, the Hydra entry point's body) ends the
process with the one line ``error: ...``."""

import ast
from pathlib import Path

import pytest

from experiments.kit import errors

REPO = Path(__file__).resolve().parents[3]
LIBRARY = [
    *sorted((REPO / "experiments" / "kit").glob("*.py")),
    *sorted((REPO / "experiments").glob("*.py")),
    *sorted((REPO / "scripts" / "analysis").glob("*.py")),
    *sorted((REPO / "scripts" / "claims").glob("*.py")),
    *sorted((REPO / "hydra_plugins").rglob("*.py")),
]
# The edges: what a command line runs before or around the library, where exiting is the point.
EDGES = {
    "experiments/kit/config.py": {"preflight", "_check_setup", "_check_schema_has", "_fail"},
    "experiments/kit/jobs.py": {"on_multirun_end"},  # Hydra's callback: the sweep's last word
    "experiments/kit/data.py": {"<module>"},  # its __main__
    "experiments/inception_fig3.py": {"main"},
    "scripts/claims/__main__.py": {"main"},
    "hydra_plugins/bn_repro_search/search_sweeper.py": {"sweep"},  # Hydra calls it: the edge
}


def _exits(path: Path) -> set[str]:
    """The functions of ``path`` that raise SystemExit or call sys.exit (``<module>``: outside
    any function)."""
    found: set[str] = set()

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            text = ast.unparse(child) if isinstance(child, (ast.Raise, ast.Call)) else ""
            if isinstance(child, ast.Raise) and "SystemExit" in text:
                found.add(where)
            if isinstance(child, ast.Call) and text.startswith(
                ("sys.exit(", "exit(", "SystemExit(")
            ):
                found.add(where)
            visit(child, where)

    visit(ast.parse(path.read_text()), "<module>")
    return found


def test_library_code_raises_errors_and_only_the_command_line_exits():
    assert LIBRARY
    for path in LIBRARY:
        name = str(path.relative_to(REPO))
        assert _exits(path) <= EDGES.get(name, set()), (name, _exits(path))


def test_the_exit_check_sees_both_ways_of_exiting(tmp_path):
    code = "import sys\ndef a():\n    raise SystemExit('x')\ndef b():\n    sys.exit(1)\ndef c():\n    return 1\n"
    (tmp_path / "m.py").write_text(code)
    assert _exits(tmp_path / "m.py") == {"a", "b"}


@pytest.mark.parametrize(
    "kind",
    [
        errors.ConfigError,
        errors.UnsafeFile,
        errors.DataUnavailable,
        errors.BadDataFile,
        errors.CollectError,
        errors.BadResults,
        errors.MissingResult,
        errors.AnalysisError,
    ],
)
def test_every_error_is_one_line_and_keeps_its_builtin_kind(kind):
    e = kind("x.json is not whole: collect it again")
    assert isinstance(e, errors.OneLineError) and str(e) == "x.json is not whole: collect it again"
    assert isinstance(errors.MissingResult("m"), FileNotFoundError)  # "not there", as before
    assert isinstance(errors.BadResults("b"), ValueError)
