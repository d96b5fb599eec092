"""Every public name of jaxdyn has its own docstring (it is what the API reference shows)."""

import dataclasses
import importlib
import inspect

import pytest

DOCUMENTED_PACKAGES = [
    "jaxdyn",
    "jaxdyn.sweep",
    "jaxdyn.runs",
    "jaxdyn.data",
    "jaxdyn.plotting",
    "jaxdyn.attention",
    "jaxdyn.gradflow",
    "jaxdyn.copyhead",
    "jaxdyn.meanfield",
]


def _public_names(module):
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        owner = getattr(obj, "__module__", None) or ""
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and owner.startswith("jaxdyn"):
            yield name, obj


def _own_docstring(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj):
        if "__doc__" not in vars(obj):
            return ""
        if dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
            return ""  # the signature dataclasses write when there is no docstring
    return doc


@pytest.mark.parametrize("package", DOCUMENTED_PACKAGES)
def test_every_public_name_has_its_own_docstring(package):
    module = importlib.import_module(package)
    missing = [name for name, obj in _public_names(module) if len(_own_docstring(obj)) < 15]
    assert not missing, f"{package}: public names without a docstring: {missing}"
