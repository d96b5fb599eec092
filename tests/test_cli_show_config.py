"""``jaxdyn run NAME --show-config``: every field with its value, default and meaning, without
importing JAX (the focus-and-dilution configs import none)."""

import dataclasses
import subprocess
import sys

SCRIPT = """
import sys
from jaxdyn.cli import main
code = main(["run", "focus-dilution-text", "--quick", "--show-config", "--set", "vocab_size=40"])
print("JAX IMPORTED" if "jax" in sys.modules else "no jax", code)
"""


def test_show_config_prints_meanings_and_defaults_without_jax():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.rstrip().endswith("no jax 0"), out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("  ", " *"))}
    assert "attention width m'" in rows["m_attn"]  # a meaning from a base class's Attributes
    assert "*vocab_size" in rows and " 40 " in rows["*vocab_size"] and " 64 " in rows["*vocab_size"]
    assert "*num_saves" in rows  # --quick's value differs from the default
    assert "additive smoothing of the bigram counts" in rows["smoothing"]


def test_every_focus_dilution_field_has_a_meaning():
    from jaxdyn.experiments.focus_dilution import _EXPERIMENTS
    from jaxdyn.runs._config import field_meanings

    for name, config, *_ in _EXPERIMENTS:
        meanings = field_meanings(config)
        missing = [f.name for f in dataclasses.fields(config) if not meanings.get(f.name)]
        assert not missing, (name, missing)


def test_every_command_prints_its_help():
    import contextlib
    import io

    import pytest

    from jaxdyn._cli._parser import build_parser

    for command in (["run"], ["reproduce"], ["report"], ["list"], ["data", "fetch"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
            build_parser().parse_args([*command, "--help"])
        assert exit_.value.code == 0, command
        assert "usage: jaxdyn" in out.getvalue(), command
