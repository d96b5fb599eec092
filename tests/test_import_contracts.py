"""The layers, enforced by import-linter (the contracts are in pyproject.toml): the library never
imports the run layer, the command line, the launcher or the experiments; the theories are
independent; jaxdyn's top-level modules and packages have no import cycle. Each contract is
also shown to fail on a copy of the package that breaks it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _lint(root: Path) -> subprocess.CompletedProcess:
    """import-linter over the ``jaxdyn`` package found first on the path under ``root``."""
    code = "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", code, str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(
        REPO / "jaxdyn", tmp_path / "jaxdyn", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tmp_path


def test_the_package_keeps_every_import_contract():
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    "module, source, broken",
    [
        # a library module that imports the run layer
        ("attention/_uses_runs.py", "from jaxdyn.runs import Run\n", "the library never imports"),
        # the hidden cycle: the run layer's launcher importing the command line
        (
            "distributed/_cycle.py",
            "def f():\n    from jaxdyn.cli import main\n",
            "no import cycles",
        ),
        # one theory importing another's internals
        ("gradflow/_cross.py", "from jaxdyn.meanfield import _fields\n", "independent"),
    ],
)
def test_each_contract_fails_when_broken(tmp_path, module, source, broken):
    root = _copy(tmp_path)
    (root / "jaxdyn" / module).write_text(source)
    result = _lint(root)
    assert result.returncode != 0
    assert broken in result.stdout.split("Broken contracts", 1)[1], result.stdout
