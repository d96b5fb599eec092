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


# ---- no process-wide state from the library (issue 44) --------------------------------------
import ast  # noqa: E402
import re  # noqa: E402

LIBRARY = [
    "attention",
    "sweep",
    "evidence",
    "data",
    "plotting",
    "gradflow",
    "copyhead",
    "meanfield",
]
_ENV_PENDING: set[str] = set()
_PATCH_PENDING: set[str] = set()


def _library_files():
    for path in sorted((REPO / "jaxdyn").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        parts = rel.split("/")
        if parts[1] in LIBRARY or (len(parts) == 2 and parts[1].startswith("_")):
            if parts[1] != "__main__.py":
                yield rel, path.read_text()


def test_the_library_reads_no_environment_variable():
    uses = re.compile(r"os\.environ|os\.getenv|os\.putenv|environ\[")
    readers = {rel for rel, text in _library_files() if uses.search(text)}
    assert readers <= _ENV_PENDING, sorted(readers - _ENV_PENDING)


def _foreign_attribute_assignments(text: str) -> list[str]:
    """Assignments to an attribute of another library's module (``equinox._ad.x = ...``)."""
    tree = ast.parse(text)
    foreign = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("jaxdyn"):
                    foreign.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module and not node.module.startswith("jaxdyn"):
                foreign |= {alias.asname or alias.name for alias in node.names}
    found = []
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AugAssign | ast.AnnAssign)
            else []
        )
        for target in targets:
            root = target
            while isinstance(root, ast.Attribute | ast.Subscript):
                root = root.value
            if target is not root and isinstance(root, ast.Name) and root.id in foreign:
                if not ast.unparse(target).startswith("sys.modules["):  # importlib's recipe
                    found.append(ast.unparse(target))
    return found


# The command line and the launcher own their process's set-up: they (and only they) may write
# its environment (XLA_FLAGS before JAX starts, EQX_ON_ERROR before equinox is imported).
_PROCESS_SETUP = ("jaxdyn/cli.py", "jaxdyn/_cli/", "jaxdyn/distributed/")


def _not_process_setup(rel: str, found: list[str]) -> list[str]:
    if rel.startswith(_PROCESS_SETUP):
        return [f for f in found if not f.startswith("os.environ[")]
    return found


def test_no_assignment_to_another_librarys_attributes():
    patched = {
        rel: found
        for path in sorted((REPO / "jaxdyn").rglob("*.py"))
        if (rel := path.relative_to(REPO).as_posix()) not in _PATCH_PENDING
        and (found := _not_process_setup(rel, _foreign_attribute_assignments(path.read_text())))
    }
    assert not patched, patched
    assert _foreign_attribute_assignments("from equinox import _ad\n_ad._strip = None\n")
    assert _foreign_attribute_assignments("import os\nos.environ['A'] = '1'\n")
    assert not _foreign_attribute_assignments("import jaxdyn\nx = 1\nself_obj = object()\n")
    assert _not_process_setup("jaxdyn/sweep/_x.py", ["os.environ['A']"])
    assert not _not_process_setup("jaxdyn/distributed/_x.py", ["os.environ['A']"])
