"""The copy-head experiments are registered and validate their configs before compiling."""

import pytest

from jaxdyn.experiments import copy_head as exp
from jaxdyn.runs import ConfigError, get_experiment

NAMES = ["copy-head-theory", "copy-head-adam", "copy-head-sgld", "copy-head-scaling"]


@pytest.mark.parametrize("name", NAMES)
def test_experiment_is_registered_with_valid_defaults_and_quick(name):
    e = get_experiment(name)
    e.config_cls().validate()
    e.config_cls(**e.config_cls.quick()).validate()


@pytest.mark.parametrize(
    "config, message",
    [
        (exp.TheoryConfig(L=8), "L must be >= 16"),
        (exp.TheoryConfig(temperature=-1.0), "temperature"),
        (exp.TheoryConfig(P_min=10.0, P_max=5.0), "P_max"),
        (exp.AdamConfig(attention="cosine"), "attention"),
        (exp.AdamConfig(P_values=()), "P_values"),
        (exp.AdamConfig(learning_rate=0.0), "learning_rate"),
        (exp.SGLDConfig(burn_in=0), "burn_in"),
        (exp.SGLDConfig(sigma_w2=0.0), "sigma_w2"),
        (exp.SGLDConfig(batch_size=-1), "batch_size"),
        (exp.ScalingConfig(L_values=(32,)), "L_values"),
        (exp.ScalingConfig(alpha=-1.0), "alpha"),
    ],
)
def test_bad_configs_are_rejected_with_one_line_errors(config, message):
    with pytest.raises(ConfigError, match=message) as info:
        config.validate()
    assert "\n" not in str(info.value)


def test_crossover_point_interpolates_in_log_P():
    import numpy as np

    P = np.array([1.0, 10.0, 100.0, 1000.0])
    c1 = np.array([0.0, 1.0, 1.0, 1.0])
    cG = np.array([0.0, 0.0, 2.0, 3.0])  # weight * c_G - c_1 = -1 at 10, +1 at 100
    assert abs(exp._crossover_point(P, c1, cG, 1.0, P_c=2.0) - np.sqrt(1000.0)) < 1e-9
    assert np.isnan(exp._crossover_point(P, c1, 0 * cG, 1.0, P_c=2.0))
