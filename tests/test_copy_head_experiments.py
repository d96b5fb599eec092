"""The copy-head experiments: registered, validated before compiling, and run end to end.

End-to-end runs are in the slow suite (``-m slow``): the --quick and the full-size run of
every experiment (complete, every check classified, no consistency failure, a negative control
per evidence check, and the verdicts that matter), and copy-head-theory at L = 8 (outside the
page's first-order regime: it must complete and report what it finds).
"""

import numpy as np
import pytest

from jaxdyn.experiments.copy_head import adam, scaling, sgld, theory
from jaxdyn.runs import ConfigError, get_experiment, read_summary, run_experiment

NAMES = [
    "copy-head-theory",
    "copy-head-adam",
    "copy-head-adam-linear",
    "copy-head-sgld",
    "copy-head-sgld-linear",
    "copy-head-scaling",
]


@pytest.mark.parametrize("name", NAMES)
def test_experiment_is_registered_with_valid_defaults_and_quick(name):
    e = get_experiment(name)
    e.config_cls().validate()
    e.config_cls(**e.config_cls.quick()).validate()


@pytest.mark.parametrize(
    "config, message",
    [
        (theory.TheoryConfig(L=1), "L must be"),
        (theory.TheoryConfig(temperature=-1.0), "temperature"),
        (theory.TheoryConfig(P_min=10.0, P_max=5.0), "P_max"),
        (theory.TheoryConfig(objective="mode"), "objective"),
        (adam.AdamConfig(attention="cosine"), "attention"),
        (adam.AdamConfig(P_values=()), "P_values"),
        (adam.AdamConfig(learning_rate=0.0), "learning_rate"),
        (adam.AdamConfig(seeds=2), "seeds"),
        (adam.AdamConfig(settings=((16, 8, 2),)), "settings"),
        (sgld.SGLDConfig(burn_in=0), "burn_in"),
        (sgld.SGLDConfig(precision="half"), "precision"),
        (sgld.SGLDConfig(sigma_w2=0.0), "sigma_w2"),
        (sgld.SGLDConfig(precursor_fractions=(0.5, 1.5)), "precursor_fractions"),
        (scaling.ScalingConfig(L_values=(32, 64)), "L_values"),
        (scaling.ScalingConfig(alpha=float("nan")), "alpha"),
    ],
)
def test_bad_configs_are_rejected_with_one_line_errors(config, message):
    with pytest.raises(ConfigError, match=message) as info:
        config.validate()
    assert "\n" not in str(info.value)


def test_small_L_and_large_V_are_valid_inputs():
    """Regions where a claim does not hold are run and reported, not refused."""
    theory.TheoryConfig(L=4, V=64, alpha=-0.5).validate()
    scaling.ScalingConfig(L_values=(2, 4, 8), V_values=(1, 64, 128)).validate()


def _run(name, path, quick=True, overrides=()):
    return read_summary(
        run_experiment(name, out=path / name, quick=quick, overrides=list(overrides), sweep={})
    )


@pytest.mark.slow
def test_theory_at_L8_completes_and_reports_a_continuous_softmax_transition(tmp_path):
    summary = _run(
        "copy-head-theory",
        tmp_path,
        overrides=[
            "L=8",
            "n_P=20",
            "P_max=300",
            "hysteresis_points=4",
            "hysteresis_seeds=2",
            "hysteresis_steps=300",
        ],
    )
    assert summary["status"] == "complete"
    assert summary["scalars"]["transition_order"] == {"softmax": "crossover", "linear": "second"}
    checks = {c["name"]: c for c in summary["checks"]}
    assert checks["softmax_order_outside_page_regime"]["kind"] == "report"
    assert checks["softmax_refinement_matches_brute_force"]["passed"]
    assert checks["linear_onset_bisection_matches_closed_form"]["passed"]
    assert checks["linear_transition_continuous"]["verdict"] == "holds"
    assert "softmax_first_order_where_page_predicts" not in checks


# What each run's science must show: measured numbers against references computed
# independently of the run (the science page's reconstruction, closed forms, the theory's own
# exponent). A verdict is not pinned: a refuted paper claim is a finding, not a failure.
def _theory_science(summary, quick):
    s = summary["scalars"]
    if s["softmax_transition_order"] != "first":
        return  # a configuration outside the first-order regime (overrides)
    # the science page's reconstruction at L = 32, V = 8, T = 1: P* = 19.5 sequences (3 digits)
    assert abs(s["softmax_P_star"] - 19.5) <= 0.05 + 1e-6 * 19.5, s["softmax_P_star"]
    # the exact finite-data action switches within a few percent of the reduced P* (finite P)
    switches = np.asarray(s["softmax_exact_action_switch_per_dataset"], float)
    assert np.all(np.abs(np.log(switches / s["softmax_P_star"])) < 0.05), switches
    # the linear onset amplitude rises like (P - P_c)^(1/2): the plain fit within its CI of 1/2
    fit = s["linear_onset_exponent_plain_fit"]
    assert fit["ci"][0] - 2e-3 <= 0.5 <= fit["ci"][1] + 2e-3, fit


def _scaling_science(summary, quick):
    s = summary["scalars"]
    # alpha = 1: the onset exponent in V is 3/2 (closed form; the page's V^{3/2}), not 2
    onset = np.asarray(s["linear_onset_law"]["local_exponents"])
    assert np.all(np.abs(onset - 1.5) < 0.02), onset
    # the crossover's L exponent approaches 3/2 from below and settles: the last pair within
    # 0.01 of it; its V exponent at L = 512 rises through 1/2 without settling
    cross = s["linear_crossover_law"]
    L_exp, V_exp = np.asarray(cross["L_local_exponents"]), np.asarray(cross["V_local_exponents"])
    assert np.all(np.diff(L_exp) > 0) and abs(L_exp[-1] - 1.5) < 0.01, L_exp
    assert V_exp.min() < 0.5 < V_exp.max() and np.all(np.diff(V_exp) > 0), V_exp


SCIENCE = {"copy-head-theory": _theory_science, "copy-head-scaling": _scaling_science}


def _assert_contract(summary, name, quick):
    counts = summary["counts"]
    assert summary["status"] == "complete" and summary["failed_members"] == 0
    assert counts["consistency_failed"] == 0, [
        c for c in summary["checks"] if c["kind"] == "consistency" and not c["passed"]
    ]
    assert counts["unclassified"] == 0 and counts["without_negative_control"] == 0
    if name in SCIENCE:
        SCIENCE[name](summary, quick)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_quick_run_is_complete_with_the_expected_verdicts(name, tmp_path):
    _assert_contract(_run(name, tmp_path), name, True)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_full_size_run_is_complete_with_the_expected_verdicts(name, tmp_path):
    _assert_contract(_run(name, tmp_path, quick=False), name, False)


@pytest.mark.parametrize(
    "n, width, snug",
    [(66, 32, 22), (30, 32, 30), (6, 32, 6), (48, 32, 24), (96, 32, 32), (1, 32, 1)],
)
def test_snug_width_fills_the_groups_a_width_needs(n, width, snug):
    from jaxdyn.experiments.copy_head._common import snug_width

    got = snug_width(n, width)
    assert got == snug
    groups = -(-n // width)
    assert -(-n // got) == groups and groups * got - n < groups


@pytest.mark.parametrize(
    "L, V, precision, group_mb, width",
    [
        (64, 8, "single", 8.0, 4),  # 2 MB of statistics per member
        (32, 8, "single", 8.0, 16),  # 0.5 MB
        (64, 8, "double", 8.0, 2),  # 4 MB
        (64, 8, "single", 1.0, 1),  # a member larger than the budget still runs, alone
    ],
)
def test_cache_width_keeps_a_groups_statistics_within_the_budget(L, V, precision, group_mb, width):
    from jaxdyn.experiments.copy_head._common import cache_width, statistics_bytes
    from jaxdyn.experiments.copy_head.sgld import SGLDConfig

    config = SGLDConfig(L=L, V=V, precision=precision, cpu_group_mb=group_mb)
    # N and NY: L^2 V^2 numbers each, counted independently of the helper
    member = 2 * (L * L * V * V) * (4 if precision == "single" else 8)
    assert statistics_bytes(config) == member
    assert cache_width(config) == width
    if width > 1:
        assert width * member <= group_mb * 2**20 < (width + 1) * member


class _StubRun:
    """What snug_sweep uses of a Run: its options, log and sweep (returning the options)."""

    def __init__(self):
        from jaxdyn.sweep import SweepOptions

        self.options, self.messages = SweepOptions(vmap_width=32), []

    def log(self, message):
        self.messages.append(message)

    def sweep(self, name, member, grid, options):
        return options


@pytest.mark.parametrize(
    "backend, group_mb, width, logged",
    [
        ("cpu", 8.0, 4, True),  # 36 members of 2 MB: 9 groups of 4
        ("cpu", 0.0, 18, False),  # no limit: 2 groups of 18 (the run's width 32, snug)
        ("cpu", 1000.0, 18, False),  # a limit above the run's width changes nothing
        ("gpu", 8.0, 18, False),  # the run's width on accelerators
    ],
)
def test_snug_sweep_caps_the_width_on_cpus_only(monkeypatch, backend, group_mb, width, logged):
    from jaxdyn.experiments.copy_head import _common
    from jaxdyn.experiments.copy_head.sgld import SGLDConfig

    monkeypatch.setattr(_common.jax, "default_backend", lambda: backend)
    run = _StubRun()
    config = SGLDConfig(L=64, V=8, cpu_group_mb=group_mb)
    options = _common.snug_sweep(run, "sgld", None, range(36), config)
    assert options.vmap_width == width
    assert bool(run.messages) == logged
    if logged:
        assert "groups of at most 4" in run.messages[0]


def test_cpu_group_mb_must_be_finite_and_non_negative():
    from jaxdyn.experiments.copy_head.sgld import SGLDConfig

    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="cpu_group_mb"):
            SGLDConfig(cpu_group_mb=bad).validate()


def test_an_extra_settings_arrays_carry_their_own_coordinates(tmp_path):
    """SettingRun.save_arrays passes labels through: the arrays as ``L16_V8.<name>``, and a
    coordinate the setting declares as ``L16_V8_<name>`` (its values are the setting's own,
    so they do not collide with the run's coordinate of the same name)."""
    from jaxdyn.experiments.copy_head._common import SettingRun
    from jaxdyn.runs import Run, load

    run = Run(tmp_path / "r", experiment="toy", echo=False)
    P, P_setting = np.arange(3.0), np.arange(4.0)
    run.save_arrays(x=np.zeros(3), dims={"x": ("theory_P",)}, coords={"theory_P": P})
    SettingRun(run, 16, 8).save_arrays(
        x=np.zeros((4, 2)), dims={"x": ("theory_P", "state")}, coords={"theory_P": P_setting}
    )
    run.finish()
    data = load(tmp_path / "r")
    assert data.unlabelled() == []
    assert data.arrays["L16_V8.x"].dims == ("L16_V8_theory_P", "state")
    np.testing.assert_array_equal(data.arrays["L16_V8.x"]["L16_V8_theory_P"].values, P_setting)
    np.testing.assert_array_equal(data.arrays["x"]["theory_P"].values, P)
