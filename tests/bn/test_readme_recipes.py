"""The README's recipes for using bn with timm, torchvision detection, Lightning, quantization and
SWA: every snippet runs as written, in order in one namespace, and prints what its comments say."""

import re
from pathlib import Path

import pytest

import bn

README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "### Using bn with timm / torchvision detection / Lightning / quantization / SWA"


def _recipes() -> list[str]:
    text = README.read_text()
    assert text.count(HEADING) == 1, HEADING
    section = re.split(r"\n#{2,3} ", text.split(HEADING, 1)[1], maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.slow
def test_the_readme_recipes_run_and_print_what_they_say(monkeypatch, capsys):
    pytest.importorskip("lightning")
    monkeypatch.setattr(bn.compiled, "_enabled", False)
    recipes = _recipes()
    assert len(recipes) == 5
    namespace: dict = {}
    for i, code in enumerate(recipes):
        said = re.findall(r"^print\(.*\)  # (.*)$", code, flags=re.M)
        exec(compile(code, f"README.md recipe {i + 1}", "exec"), namespace)
        assert capsys.readouterr().out.splitlines() == said and said, i
