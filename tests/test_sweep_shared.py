"""Solves in a shared form: inside ``run_sweep`` a ``simulate_gaussian`` of softmax or L2
attention is solved padded with zero blocks
(``GaussianODE.shared_form``), so that member functions of one kind and different dimensions
share one compiled segment program; the padded solve is the unpadded one to the solver's
tolerance, and unsegmented (``segment_steps=0``) the sweep solves the same shared form, bitwise
at equal group widths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.meanfield import simulate_gaussian
from jaxdyn.meanfield._simulate_gaussian import gaussian_ode, shared_size
from jaxdyn.meanfield.fields import L2, QuadraticKeySoftmax, Softmax
from jaxdyn.sweep import Grid, SweepCache, SweepOptions, run_sweep

RTOL, ATOL = 1e-8, 1e-10


def _params(d, n, seed=0):
    """Heads that blow up (V ~ I) or settle (V ~ -I, the steady-state event)."""
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(n, d, d))
    return {
        "Q": rng.normal(size=(n, d, d)),
        "K": rng.normal(size=(n, d, d)),
        "V": rng.choice([-1.0, 1.0], (n, 1, 1)) * (np.eye(d) + 0.3 * rng.normal(size=(n, d, d))),
        "cov0": g @ np.swapaxes(g, 1, 2) / d + 0.1 * np.eye(d),
        "tol": 10.0 ** rng.uniform(-4, -2, n),
    }


FIELDS = {"softmax": Softmax, "l2": L2}


def _solves(kind, p):
    """Each member solved directly and in its shared form (one program per kind and size)."""

    def both(q):
        d = q["cov0"].shape[-1]
        ode = gaussian_ode(
            FIELDS[kind](q["Q"], q["K"], q["V"]),
            jnp.zeros(d),
            q["cov0"],
            30.0,
            steady_tol=q["tol"],
            rtol=RTOL,
            atol=ATOL,
        )
        shared = ode.shared_form().diffeq_problem().solve()
        return ode.solution(ode.diffeq_problem().solve()), (
            ode.solution(ode.restrict(shared)),
            shared.ys[1][1][-1],
        )

    return jax.jit(jax.vmap(both))({k: jnp.asarray(v) for k, v in p.items()})


def test_shared_sizes():
    assert [shared_size(d) for d in (1, 2, 3, 4, 5, 6, 9)] == [2, 2, 5, 5, 5, 6, 9]


@pytest.mark.parametrize(
    ("kind", "d"),
    [
        ("softmax", 3),
        pytest.param("l2", 4, marks=pytest.mark.slow),
        pytest.param("softmax", 5, marks=pytest.mark.slow),
    ],
)
@pytest.mark.slow
def test_the_shared_form_is_the_problem_to_the_solvers_tolerance(kind, d):
    p = _params(d, 3, seed=d)
    direct, (shared, padded_cov) = _solves(kind, p)
    size = shared_size(d)
    assert padded_cov.shape == (3, size, size)
    # the padding stays exactly zero
    padded_cov = np.asarray(padded_cov)
    assert not np.any(padded_cov[:, d:, :]) and not np.any(padded_cov[:, :, d:])
    np.testing.assert_array_equal(shared.status._value, direct.status._value)
    if size == d:  # unpadded, the shared form is the problem itself, bitwise
        np.testing.assert_array_equal(shared.final_cov, direct.final_cov)
        np.testing.assert_array_equal(shared.t_final, direct.t_final)
    # Same steps up to round-off (the norm counts the real components only): the states
    # differ by round-off amplified along the solve, far below the solver's local tolerance
    # times the steps taken (rtol 1e-8 x a few hundred steps). Round-off in the error
    # estimate flips an accept/reject decision only where the error ratio is within ~1e-12 of
    # 1, a step or two each time; a different step count of more than 1% would be another
    # problem, not round-off.
    steps = np.asarray(direct.num_steps)
    scale = 1.0 + np.max(np.abs(direct.final_cov), axis=(1, 2))
    bound = RTOL * steps
    assert np.all(np.max(np.abs(shared.final_cov - direct.final_cov), axis=(1, 2)) / scale < bound)
    assert np.all(np.abs(shared.t_final - direct.t_final) < bound * direct.t_final)
    assert np.all(np.abs(np.asarray(shared.num_steps) - steps) <= 2 + 0.01 * steps)


def test_a_problem_without_a_shared_form_says_so():
    ode = gaussian_ode(
        Softmax(np.eye(2), np.eye(2), -np.eye(2)),
        jnp.zeros(2),
        jnp.eye(2),
        1.0,
        events={"x": lambda t, m, c: c[0, 0] - 0.5},
    )
    with pytest.raises(ValueError, match="shared_form"):
        ode.shared_form()
    # a QuadraticKeySoftmax problem is solved as written
    quadratic = QuadraticKeySoftmax(np.eye(2), np.eye(2), -np.eye(2))
    with pytest.raises(ValueError, match="shared_form"):
        gaussian_ode(quadratic, jnp.zeros(2), jnp.eye(2), 1.0).shared_form()


def _member(kind):
    def member(p, key):
        d = p["cov0"].shape[0]
        field = (Softmax if kind == "softmax" else L2)(p["Q"], p["K"], p["V"])
        sol = simulate_gaussian(
            field, jnp.zeros(d), p["cov0"], 30.0, steady_tol=p["tol"], rtol=RTOL, atol=ATOL
        )
        return {
            "cov": sol.final_cov,
            "t": sol.t_final,
            "steps": sol.num_steps,
            "status": sol.status,
        }

    return member


@pytest.mark.slow  # four sweeps of event-stopped solves: ~40 s of compilation
def test_member_functions_of_one_kind_and_different_sizes_share_one_segment_program():
    SweepCache.default.clear()
    options = SweepOptions(vmap_width=4, segment_steps=16, segment_width=4)
    first = run_sweep(_member("softmax"), Grid.zip(_params(3, 8)), options=options)
    assert first.n_compilations == 4  # problems, start, one segment program, outputs
    softmax4 = run_sweep(_member("softmax"), Grid.zip(_params(4, 8, seed=2)), options=options)
    assert softmax4.n_compilations == 2  # problems and outputs: start and segment are shared
    params = _params(4, 8, seed=1)
    l2 = run_sweep(_member("l2"), Grid.zip(params), options=options)
    assert l2.n_compilations == 4  # the kind is static: L2 has its own start and segment
    # unsegmented, the same shared solve: bitwise the same (equal group widths)
    whole = run_sweep(
        _member("l2"), Grid.zip(params), options=SweepOptions(vmap_width=4, segment_steps=0)
    )
    np.testing.assert_array_equal(whole.status, l2.status)
    for key in l2.outputs:
        np.testing.assert_array_equal(whole.outputs[key], l2.outputs[key], err_msg=key)
    # and they are the member's own solve to the solver's tolerance
    direct = jax.vmap(_member("l2"))(
        {k: jnp.asarray(v) for k, v in params.items()}, jax.random.split(jax.random.key(0), 8)
    )
    scale = 1.0 + np.max(np.abs(direct["cov"]), axis=(1, 2))
    bound = RTOL * np.asarray(direct["steps"])
    assert np.all(np.max(np.abs(l2.outputs["cov"] - direct["cov"]), axis=(1, 2)) / scale < bound)


@pytest.mark.slow  # two first sweeps of event-stopped solves: ~15 s of compilation
def test_compiling_on_several_threads_changes_neither_results_nor_compilations(monkeypatch):
    """The engine compiles a chunk's programs in one thread per usable core (the narrow
    segment width ahead, with ``narrow_after = 0``); on one core, one after another and the
    narrow width when first used. Both give the same programs: bitwise the same results and
    the same number of compilations (every one counted, wherever it ended)."""
    import jaxdyn.sweep._programs as programs

    options = SweepOptions(vmap_width=8, segment_steps=16, segment_width=4)
    params = _params(2, 12, seed=3)  # blow-ups and steady states of very different lengths
    submit = programs.ConcurrentCompiler.submit
    batches: list[list[str]] = []  # the programs handed to each compiler, in order

    def recording(self, lowered, options):
        if not batches or batches[-1][0] is not self:
            batches.append([self])
        batches[-1].append(lowered.as_text()[:200].split("module @")[1].split()[0])
        return submit(self, lowered, options)

    monkeypatch.setattr(programs.ConcurrentCompiler, "submit", recording)
    results, seen = {}, {}
    for threads in (1, 2):
        monkeypatch.setattr(programs, "usable_cores", lambda threads=threads: threads)
        SweepCache.default.clear()
        jax.clear_caches()  # compile again, not from jax's in-memory caches
        batches.clear()
        results[threads] = run_sweep(_member("softmax"), Grid.zip(params), options=options)
        seen[threads] = [[name.removeprefix("jit__sweep_") for name in b[1:]] for b in batches]
    # one core: the segment programs one at a time, when first used; two: all at once, the
    # widest segment program first
    assert seen[1] == [
        ["problems", "start_shared", "finish"],
        ["advance_shared"],
        ["advance_shared"],
    ]
    assert seen[2] == [["advance_shared", "advance_shared", "problems", "start_shared", "finish"]]
    one, two = results[1], results[2]
    # problems, start, finish and the segment programs of both widths (8 and the narrow 4)
    assert one.n_compilations == two.n_compilations == 5
    np.testing.assert_array_equal(one.status, two.status)
    for key in one.outputs:
        np.testing.assert_array_equal(one.outputs[key], two.outputs[key], err_msg=key)
    assert len(np.unique(one.outputs["steps"])) > 3  # the narrow width was needed
