"""The code in docs/extending.md's "Your own ..." sections runs as written (slow: it solves a
full focus-dilution analysis)."""

import re
from pathlib import Path

import pytest

EXTENDING = Path(__file__).parents[1] / "docs" / "extending.md"


def _theory_snippets() -> list[str]:
    text = EXTENDING.read_text()
    start = text.index("## Your own attention")
    return re.findall(r"```python\n(.*?)```", text[start:], re.S)


def test_there_is_a_snippet_per_theory():
    assert len(_theory_snippets()) == 4


@pytest.mark.slow
@pytest.mark.parametrize("index", range(4))
def test_extending_snippet_runs(index):
    exec(compile(_theory_snippets()[index], f"extending.md snippet {index}", "exec"), {})
