"""ExperimentConfig.RANGES: every class's ranges checked, finite values only, one-line errors."""

import dataclasses
from typing import ClassVar

import pytest

from jaxdyn.runs import ConfigError, ExperimentConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Base(ExperimentConfig):
    RANGES: ClassVar[str] = "rate > 0"
    rate: float = 1.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Child(_Base):
    RANGES: ClassVar[str] = "frac [0, 1); sizes >= 2"
    frac: float = 0.5
    sizes: tuple[int, ...] = (2, 4)


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"rate": 0.0}, "rate must be > 0, got 0.0"),  # the base class's range
        ({"rate": float("inf")}, "rate must be > 0, got inf"),
        ({"rate": float("nan")}, "rate must be > 0, got nan"),
        ({"frac": 1.0}, "frac must be in [0, 1), got 1.0"),
        ({"sizes": (2, 1)}, "sizes must be >= 2, got (2, 1)"),  # every entry of a tuple
        ({"seed": -1}, "seed must be >= 0, got -1"),
    ],
)
def test_out_of_range_is_a_one_line_error(bad, message):
    with pytest.raises(ConfigError) as err:
        _Child(**bad).validate()
    assert str(err.value) == message


def test_in_range_passes_at_the_closed_ends():
    _Child(rate=1e-300, frac=0.0, sizes=(2,)).validate()
