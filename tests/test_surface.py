"""The public surface is a decision: every public package's ``__all__`` equals its snapshot.

One file per public package, ``tests/surface/<dotted.package.name>.txt``: the sorted names of
its ``__all__``, one per line. Adding, removing or renaming a public name fails this test
until the snapshot changes with it (regenerate one with
``python -c "import jaxdyn.gradflow as m; print('\\n'.join(sorted(m.__all__)))" >
tests/surface/jaxdyn.gradflow.txt``). Two budgets hold the surface small: at most 150 distinct
public objects across today's packages (a re-export counted once; each theory's ``claims``
module is the paper's claims table and is counted apart), and at most 55 in the core
(jaxdyn, sweep, runs, evidence, attention, data, plotting, distributed).
"""

from __future__ import annotations

import importlib
import inspect
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = REPO / "jaxdyn"
SNAPSHOTS = pathlib.Path(__file__).resolve().parent / "surface"

# the application layer: the command line and the registered experiments have no API
APPLICATION = {"jaxdyn.cli", "jaxdyn.experiments", "jaxdyn.__main__"}
CORE = [
    "jaxdyn",
    "jaxdyn.sweep",
    "jaxdyn.runs",
    "jaxdyn.evidence",
    "jaxdyn.attention",
    "jaxdyn.data",
    "jaxdyn.plotting",
    "jaxdyn.distributed",
]
CORE_BUDGET = 55
API_BUDGET = 150
# The packages beyond the papers (issue 49) have a budget of their own, outside the 150.
BEYOND = ["jaxdyn.llc", "jaxdyn.induction"]
BEYOND_BUDGET = 25
# Packages whose __all__ their own branch writes (issue 48): until then their snapshot holds
# the public attributes they have today. This set empties when that branch lands.
PENDING_ALL: set[str] = set()


def public_modules() -> list[str]:
    """Every public package or module under jaxdyn (no path part with a leading underscore),
    except the application layer."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts):
            continue
        name = ".".join(parts)
        if any(name == a or name.startswith(a + ".") for a in APPLICATION):
            continue
        names.append(name)
    return names


def is_claims(name: str) -> bool:
    return name.rsplit(".", 1)[-1] == "claims"


def exported(module) -> list[str]:
    """A module's ``__all__``; for a package of ``PENDING_ALL`` without one, its public
    attributes (not submodules)."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    if module.__name__ not in PENDING_ALL:
        raise AssertionError(f"{module.__name__} defines no __all__")
    return [n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v)]


def snapshot(name: str) -> list[str]:
    path = SNAPSHOTS / f"{name}.txt"
    if not path.exists():
        return []
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def surface_differences(module) -> str:
    """What differs between a module's ``__all__`` and its snapshot ("" when they agree)."""
    names = exported(module)
    duplicated = sorted({n for n in names if names.count(n) > 1})
    missing = [n for n in names if not hasattr(module, n)]
    want = snapshot(module.__name__)
    added, removed = sorted(set(names) - set(want)), sorted(set(want) - set(names))
    problems = []
    if added:
        problems.append(f"added {added}")
    if removed:
        problems.append(f"removed {removed}")
    if duplicated:
        problems.append(f"listed twice {duplicated}")
    if missing:
        problems.append(f"in __all__ but not defined {missing}")
    if not (SNAPSHOTS / f"{module.__name__}.txt").exists():
        problems.append("no snapshot file")
    if problems:
        return (
            f"{module.__name__}: " + "; ".join(problems) + f" (update tests/surface/"
            f"{module.__name__}.txt if the change is meant)"
        )
    return ""


def distinct_objects(names: list[str]) -> dict[int, str]:
    """``{id(object): "package.name"}`` over the ``__all__`` of ``names``: a re-export counts
    once."""
    objects = {}
    for name in names:
        module = importlib.import_module(name)
        for attr in exported(module):
            objects.setdefault(id(getattr(module, attr)), f"{name}.{attr}")
    return objects


MODULES = public_modules()


def test_the_public_modules_are_the_known_ones():
    for name in CORE + ["jaxdyn.gradflow", "jaxdyn.copyhead", "jaxdyn.meanfield"]:
        assert name in MODULES
    assert not any(m.startswith(("jaxdyn.experiments", "jaxdyn.cli")) for m in MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_all_equals_its_snapshot(name):
    module = importlib.import_module(name)
    assert surface_differences(module) == ""


def test_a_snapshot_file_belongs_to_a_public_module():
    orphans = sorted(p.stem for p in SNAPSHOTS.glob("*.txt") if p.stem not in MODULES)
    assert not orphans, f"snapshot files of no public module: {orphans}"


def test_the_snapshot_test_fails_when_a_name_is_added_or_removed(monkeypatch):
    import jaxdyn.evidence as module

    assert surface_differences(module) == ""
    monkeypatch.setattr(module, "__all__", [*module.__all__, "ErrorModel"])
    assert "listed twice ['ErrorModel']" in surface_differences(module)
    monkeypatch.setattr(module, "__all__", [*module.__all__[:-1], "_decisions"])
    assert "added ['_decisions']" in surface_differences(module)
    monkeypatch.setattr(module, "__all__", [n for n in module.__all__ if n != "within"])
    assert "removed ['within']" in surface_differences(module)
    monkeypatch.setattr(module, "__all__", [*module.__all__, "not_a_name"])
    assert "not defined ['not_a_name']" in surface_differences(module)
    assert "added ['_decisions', 'not_a_name']" in surface_differences(module)


def test_the_core_holds_at_most_55_public_objects():
    objects = distinct_objects(CORE)
    assert len(objects) <= CORE_BUDGET, sorted(objects.values())


def api_modules() -> list[str]:
    """Today's packages (the papers' theories and the core), without the claims modules."""
    return [
        m
        for m in MODULES
        if not is_claims(m) and not any(m == b or m.startswith(b + ".") for b in BEYOND)
    ]


def test_the_packages_beyond_the_papers_hold_at_most_25_public_objects():
    modules = [
        m
        for m in MODULES
        if not is_claims(m) and m.split(".")[:2] in [b.split(".") for b in BEYOND]
    ]
    assert set(modules) >= set(BEYOND)
    objects = distinct_objects(modules)
    assert len(objects) <= BEYOND_BUDGET, sorted(objects.values())


def test_the_api_holds_at_most_150_public_objects():
    objects = distinct_objects(api_modules())
    assert len(objects) <= API_BUDGET, f"{len(objects)} public objects"


def test_claims_modules_are_listed_apart():
    """Each theory's claims (``jaxdyn.<theory>.claims``) are the paper's claims table: listed
    and counted on their own, not in the API budget; every claim returns Evidence-shaped
    results, so it must be a function."""
    for name in [m for m in MODULES if is_claims(m)]:
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), name
        for attr in module.__all__:
            assert callable(getattr(module, attr)), f"{name}.{attr} is not a claim function"
