"""The copy-head experiments: registered, validated before compiling, and run end to end.

End-to-end runs are in the slow suite (``-m slow``): the --quick and the full-size run of
every experiment (complete, every check classified, no consistency failure, a negative control
per evidence check, and the verdicts that matter), and copy-head-theory at L = 8 (outside the
page's first-order regime: it must complete and report what it finds).
"""

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


# The verdicts each experiment must reach at quick and full size (the others are recorded
# with their verdicts: a refuted paper claim is a finding, not a failure).
EXPECTED = {
    "copy-head-theory": {
        "softmax_first_order_where_page_predicts": "holds",
        "linear_transition_continuous": "holds",
        "linear_onset_exponent": "holds",
        "softmax_exact_action_hysteresis_inside_window": "holds",
    },
    "copy-head-scaling": {
        "linear_onset_V2": "refuted",  # alpha = 1: P_c ~ V^(3/2) (docs/copy_head.md)
        "linear_onset_V2_alpha0": "holds",
    },
    "copy-head-adam": {"adam_transition_order_from_refinement": "holds"},
    "copy-head-adam-linear": {"adam_no_hysteresis": "holds"},
    "copy-head-sgld": {},
    "copy-head-sgld-linear": {"sgld_no_hysteresis": "holds"},
}


def _assert_contract(summary, name):
    counts = summary["counts"]
    assert summary["status"] == "complete" and summary["failed_members"] == 0
    assert counts["consistency_failed"] == 0, [
        c for c in summary["checks"] if c["kind"] == "consistency" and not c["passed"]
    ]
    assert counts["unclassified"] == 0 and counts["without_negative_control"] == 0
    verdicts = {c["name"]: c.get("verdict") for c in summary["checks"]}
    for check, verdict in EXPECTED[name].items():
        assert verdicts[check] == verdict, (check, verdicts[check])


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_quick_run_is_complete_with_the_expected_verdicts(name, tmp_path):
    _assert_contract(_run(name, tmp_path), name)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_full_size_run_is_complete_with_the_expected_verdicts(name, tmp_path):
    _assert_contract(_run(name, tmp_path, quick=False), name)


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
