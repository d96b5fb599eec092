"""Precursors of the copy-head posterior's transition: fluctuations of the transition's order
parameter below it, against the Laplace (Gaussian) variance at the mode (copy_head.md, "What
the theory predicts": precursors announce the linear transition, none before softmax's jump)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead import _heads
from ...copyhead._fluctuations import laplace_covariance
from ._common import padded_statistics
from ._networks import transition_key


@eqx.filter_jit
def _laplace_variance(posterior, stats, G, key_index: int):
    observable = lambda g: jnp.stack(ch.order_parameters(posterior.attention(g)))[key_index][None]
    return laplace_covariance(posterior, stats, G, observable)[0, 0]


def _fluctuations(a, pre, posterior, P_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Per precursor chain: the mean squared deviation of the transition's order parameter
    from the mode, and the Laplace variance at that mode (same data).

    Odd heads (A(-G) = -A(G)): the symmetric state G = 0 is exactly stationary and the samples
    are reported modulo the mirror, so the fluctuation is measured as E[o^2] about o = 0
    (mirror invariant); otherwise about the mode reached from the chain."""
    c = a.config
    key = transition_key(c)
    idx = 1 if key == "c_G" else 0
    P, seeds, ok = pre.params["P"], pre.seeds, pre.ok()
    odd = isinstance(posterior.head, _heads.AbstractOddCopyHead)
    ref = np.zeros(P.shape) if odd else pre.outputs[f"mode_{key}"]
    dev = np.nanmean((pre.outputs[f"mala_{key}"] - ref[:, None]) ** 2, axis=1)
    lap = np.full(P.shape, np.nan)
    for i in np.flatnonzero(ok):
        k_data = jax.random.split(jax.random.key(int(seeds[i])), 3)[0]
        stats, _ = padded_statistics(k_data, c.L, c.V, P[i], P_max)
        G = np.zeros((c.L, c.L)) if odd else pre.outputs["mode_G"][i]
        lap[i] = float(_laplace_variance(posterior, stats, jnp.asarray(G), idx))
    return dev, lap


def check_precursors(run, a, pre, posterior, P_max: int) -> None:
    """MALA from the uniform state at P = f P_t: the fluctuation of the transition's order
    parameter against the Laplace variance at the mode (:func:`_fluctuations`).

    The comparison covers P <= 0.5 P_t, where the Gaussian approximation holds (towards the
    onset the quartic terms of the action cap the fluctuations below Laplace's), with the
    99% Student-t interval over datasets. The rise of the variance from the lowest to the
    highest P is compared with the Laplace rise, against no rise (linear) or a divergent
    1 / (P_t - P) rise (softmax, where the page predicts no precursor)."""
    c = a.config
    P = pre.params["P"]
    dev, lap = _fluctuations(a, pre, posterior, P_max)
    Ps = np.unique(P)
    measured = np.array([np.nanmean(dev[P == p]) for p in Ps])
    laplace = np.array([np.nanmean(lap[P == p]) for p in Ps])
    ratio_by_P = dev / lap
    run.save_arrays(
        **{
            "precursor.P_over_P_t": Ps / a.P_t,
            "precursor.variance": measured,
            "precursor.laplace": laplace,
        },
        dims={f"precursor.{k}": ("precursor_P",) for k in ("P_over_P_t", "variance", "laplace")},
        coords={"precursor_P": Ps},
    )
    run.scalar(
        "precursor",
        {
            "P_over_P_t": (Ps / a.P_t).tolist(),
            "variance": measured.tolist(),
            "laplace": laplace.tolist(),
        },
    )
    low = Ps / a.P_t <= 0.5
    run.evidence(
        "precursor_variance_matches_laplace",
        ch.claims.matches_theory(
            "below the transition (P <= 0.5 P_t) the posterior variance of the order parameter "
            "is the Laplace (Gaussian) variance at the mode",
            np.stack([_per_dataset(ratio_by_P, pre, p) for p in Ps[low]], axis=1),
            np.ones(int(low.sum())),
            np.full(int(low.sum()), 0.5),
            basis="measured / Laplace variance per dataset; alternative: off by half",
        ),
        note=f"P / P_t = {np.round(Ps[low] / a.P_t, 3).tolist()}",
    )
    first, last = Ps[0], Ps[-1]
    rise = np.log(
        _per_dataset(ratio_by_P, pre, last, dev) / _per_dataset(ratio_by_P, pre, first, dev)
    )
    laplace_rise = float(np.log(laplace[-1] / laplace[0]))
    f0, f1 = first / a.P_t, last / a.P_t
    divergent = float(np.log((1 - f0) / (1 - f1)))  # a mean-field precursor: 1 / (P_t - P)
    linear = c.attention == "linear"
    run.scalar(
        "precursor_rise",
        {"measured_ln": rise.tolist(), "laplace_ln": laplace_rise, "divergent_ln": divergent},
    )
    run.evidence(
        "precursor_as_page_predicts",
        ch.claims.matches_theory(
            "precursors announce the linear onset (the variance rises as the Laplace variance "
            "diverging at P_c); none before softmax's first-order jump",
            rise[:, None],
            np.array([laplace_rise]),
            np.array([abs((0.0 if linear else divergent) - laplace_rise)]),
            alternative=np.array([0.0 if linear else divergent]),
            basis=f"ln(variance at {f1:.2g} P_t / at {f0:.2g} P_t) per dataset; alternative: "
            + ("no rise (ln 0)" if linear else "the divergent rise ln((1 - f0) / (1 - f1))"),
        ),
        note=f"Laplace ln rise {laplace_rise:.3g}, divergent {divergent:.3g}",
    )


def _per_dataset(_ratio, pre, p, values=None):
    """Per dataset (seed) at P = p: the mean of ``values`` (default the ratio of measured to
    Laplace variance) over its chains."""
    P, seeds = pre.params["P"], pre.seeds
    v = _ratio if values is None else values
    return np.array([np.nanmean(v[(P == p) & (seeds == s)]) for s in np.unique(seeds)])
