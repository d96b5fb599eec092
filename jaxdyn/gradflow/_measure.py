"""Measurements the focus-and-dilution claims read (host-side NumPy on saved arrays): the
plateau nearest a critical point, the linear window of the condensation, crossing resolutions,
pooled slopes, query drop times, the PCA picture, the score direction and the dilution mode's
growth. Verdicts on them live in :mod:`jaxdyn.gradflow.claims`."""

from __future__ import annotations

import numpy as np

# the linearisation's rate error may be at most this fraction of the rate in a linear window
LINEAR_WINDOW = 0.01


def _sin(u, v) -> float:
    u, v = np.asarray(u, float), np.asarray(v, float)
    c = abs(u @ v) / (np.linalg.norm(u) * np.linalg.norm(v))
    return float(np.sqrt(max(0.0, 1.0 - c * c)))


def _profile(W0, pi) -> tuple[np.ndarray, np.ndarray]:
    """``(alpha, gamma = W0 alpha)`` with the sign ``gamma . pi > 0`` (NumPy twin of
    :func:`embedding_profile`, for saved arrays)."""
    W0 = np.asarray(W0, float)
    alpha = np.linalg.svd(W0, full_matrices=False)[2][0]
    if (W0 @ alpha) @ np.asarray(pi, float) < 0:
        alpha = -alpha
    return alpha, W0 @ alpha


def _dilution_mode(gamma, pi) -> np.ndarray:
    """:func:`dilution_mode` on the last axis of saved profiles (NumPy)."""
    gamma, pi = np.asarray(gamma, float), np.asarray(pi, float)
    top = int(np.argmax(pi))
    rest = gamma.sum(axis=-1) - gamma[..., top]
    return np.asarray((1.0 - pi[top]) * gamma[..., top] - pi[top] * rest)


def _angle(cos) -> float:
    return float(np.arccos(np.clip(cos, -1.0, 1.0)))


def plateau_loss(
    ts, loss, grad_norm, t_from: float, t_to: float, eigenvalues
) -> tuple[float, float, float]:
    """The loss where the flow is nearest a critical point between ``t_from`` and ``t_to``
    (smallest ``||grad L||`` among the saves) and the error bound of the quadratic model there:
    ``|L - L*| <= ||grad L||^2 / (2 lambda_min)``, ``lambda_min`` the smallest non-zero
    ``|eigenvalue|`` of ``J`` at the saddle. Returns ``(time, loss, bound)`` (``nan`` when no
    save lies in the window)."""
    ts, loss, g = (np.asarray(x, dtype=float) for x in (ts, loss, grad_norm))
    sel = np.nonzero((ts >= t_from) & (ts <= t_to) & np.isfinite(g))[0]
    if sel.size == 0:
        return float("nan"), float("nan"), float("nan")
    i = sel[np.argmin(g[sel])]
    ev = np.abs(np.asarray(eigenvalues, dtype=float))
    smallest = float(np.min(ev[ev > 1e-9 * ev.max()]))
    return float(ts[i]), float(loss[i]), float(g[i] ** 2 / (2 * smallest))


def linear_window(ts, nonlinearity, rate: float, t_max: float) -> int:
    """Index of the last save before ``t_max`` (and after 0) where the linearisation's rate error
    is at most :data:`LINEAR_WINDOW` of ``rate``, or ``-1`` if there is none."""
    ts, err = np.asarray(ts, dtype=float), np.asarray(nonlinearity, dtype=float)
    ok = np.nonzero((ts > 0) & (ts <= t_max) & (err <= LINEAR_WINDOW * abs(rate)))[0]
    return int(ok[-1]) if ok.size else -1


def stage_resolution(ts, times) -> np.ndarray:
    """The time resolution of each crossing time: the spacing of the saves around it (a
    crossing is interpolated between two saves); ``nan`` for a time not reached."""
    ts = np.asarray(ts, float)
    out = []
    for t in np.asarray(times, float):
        if not np.isfinite(t):
            out.append(np.nan)
            continue
        i = int(np.clip(np.searchsorted(ts, t), 1, len(ts) - 1))
        out.append(float(ts[i] - ts[i - 1]))
    return np.asarray(out)


def pooled_slope(x, y, groups, nuisance=None) -> tuple[float, float, int]:
    """Least-squares slope of ``y`` on ``x`` with one intercept per group (the groups share the
    slope) and optional ``nuisance`` regressors (columns, e.g. a known next-order term):
    ``(slope, standard error, degrees of freedom)``; ``nan`` standard error without residual
    degrees of freedom."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    groups = np.asarray(groups)
    extra = np.zeros((x.size, 0)) if nuisance is None else np.asarray(nuisance, float)
    extra = extra.reshape(x.size, -1)
    ok = np.isfinite(x) & np.isfinite(y) & np.all(np.isfinite(extra), axis=1)
    x, y, groups, extra = x[ok], y[ok], groups[ok], extra[ok]
    labels = np.unique(groups)
    if x.size == 0:
        return float("nan"), float("nan"), 0
    X = np.column_stack([x, extra] + [(groups == g).astype(float) for g in labels])
    dof = x.size - X.shape[1]
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    if dof <= 0 or np.linalg.matrix_rank(X) < X.shape[1]:
        return float(coef[0]), float("nan"), max(dof, 0)
    resid = y - X @ coef
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.inv(X.T @ X)
    return float(coef[0]), float(np.sqrt(cov[0, 0])), int(dof)


def condensation_fit(ts, amplitude, nonlinearity, rate: float, t_max: float):
    """Growth rate of the projection on the unstable eigenspace at ``theta = 0``, fitted on the
    saves before ``t_max`` where the linearisation's rate error is at most :data:`LINEAR_WINDOW`
    of ``rate``. Returns ``(fit or None, bound)``: the slope of a least-squares line is a
    weighted mean of the local log-slopes, so it lies within the window's largest rate error of
    the linear rate."""
    from .._numerics import fit_exponential

    ts, err = np.asarray(ts, float), np.asarray(nonlinearity, float)
    sel = (err <= LINEAR_WINDOW * abs(rate)) & (ts <= t_max) & (ts > 0)
    if sel.sum() < 3:
        return None, float("nan")
    return fit_exponential(ts[sel], np.asarray(amplitude)[sel]), float(err[sel].max())


def query_drop_times(ts, entropy_query, uniform: float, fall: float = 0.01) -> np.ndarray:
    """For each query, the first save time at which its attention entropy is ``fall`` below
    ``H(pi)`` (its uniform-attention value); ``nan`` if it never is."""
    ts = np.asarray(ts, float)
    H = np.asarray(entropy_query, float)
    below = H <= (1.0 - fall) * uniform
    out = np.full(H.shape[1], np.nan)
    for q in range(H.shape[1]):
        hit = np.nonzero(below[:, q] & (ts > 0))[0]
        if hit.size:
            out[q] = ts[hit[0]]
    return out


def pca_stage_changes(ts, W0, pi, t_departure: float, t_new: float, t_dilution: float):
    """PCA of the embedding rows (shared axes over the run, :func:`embedding_pca`; PC1 signed so
    that the frequent row is positive): the change from ``t_departure`` to ``t_new`` of the
    frequent row's and of the pi-weighted low-frequency rows' PC1 coordinate, and the PC2
    spread of the rows at ``t_dilution`` and at the end (a time not reached reads the end)."""
    from ._metrics import embedding_pca

    pca = embedding_pca(W0)
    ts, pi = np.asarray(ts, float), np.asarray(pi, float)
    top = int(np.argmax(pi))
    low = np.arange(len(pi)) != top
    x = pca[:, :, 0] * np.sign(pca[-1, top, 0] or 1.0)

    def at(t):
        return int(min(np.searchsorted(ts, t), len(ts) - 1)) if np.isfinite(t) else len(ts) - 1

    i0, i1, i_dil = at(t_departure), at(t_new), at(t_dilution)
    x_low = x[:, low] @ pi[low] / pi[low].sum()
    spread = np.ptp(pca[:, :, 1], axis=1) if pca.shape[2] > 1 else np.zeros(len(ts))
    return {
        "top_pc1_change": float(x[i1, top] - x[i0, top]),
        "low_pc1_change": float(x_low[i1] - x_low[i0]),
        "pc2_spread_at_dilution": float(spread[i_dil]),
        "pc2_spread_at_end": float(spread[-1]),
    }


def _attention_modes(alpha, WQ, WK, WQ_prev, WK_prev) -> tuple[float, float]:
    """``(growing, other)``: the amplitudes ``||alpha^T (WQ +- WK)|| / 2`` of the two attention
    modes at the saddle, the growing one first (the larger log-growth since the previous save;
    the larger amplitude when there is no previous save)."""
    now = np.array([np.linalg.norm(alpha @ (WQ + WK)), np.linalg.norm(alpha @ (WQ - WK))]) / 2
    before = (
        np.array(
            [
                np.linalg.norm(alpha @ (WQ_prev + WK_prev)),
                np.linalg.norm(alpha @ (WQ_prev - WK_prev)),
            ]
        )
        / 2
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        growth = np.log(now) - np.log(before)
    k = (
        int(np.argmax(now))
        if not np.all(np.isfinite(growth)) or np.allclose(growth, 0)
        else (int(np.argmax(growth)))
    )
    return float(now[k]), float(now[1 - k])


def score_angle(
    ts, W0, WQ, WK, pi, c: float, saddle_W0, t_from: float, t_to: float, *, t_noise=None
):
    """The direction of ``Phi = W0 WQ WK^T W0^T`` against ``sign(c) pi pi^T`` while the
    attention grows out of the unigram saddle, with the linearisation's bound on it.

    Near the saddle ``W0 = gamma_v alpha^T + E`` (``gamma_v`` the profile of ``saddle_W0``, the
    embedding of the saddle the flow visits, ``alpha`` the top right singular vector of
    ``W0``) and ``(WQ, WK)`` is the unstable attention mode (``WQ = alpha q^T``,
    ``WK = +-alpha q^T``, ``|q| = ||alpha^T (WQ +- WK)|| / 2``, the sign whose amplitude grows
    at that save)
    plus a part that does not grow there: the rest of ``(WQ, WK)``, of norm at most ``N =
    ||(WQ, WK)||`` at ``t_noise``, and the other (stable, rate ``-|c|``) attention mode, whose
    amplitude ``q_s`` is read at each save (condensation can leave it large). Then
    ``Phi = a gamma_v gamma_v^T + R`` with ``sign(a)`` the growing mode's sign (``sign(c)`` by
    the theory) and ``||R|| / (|a| ||gamma_v||^2) <= r = (2 e + e^2) (1 + nu)^2 /
    (1 - 2 nu - nu^2)``, ``e = ||E|| / ||gamma_v||``, ``nu = (N + q_s) / |q|``; so the angle between
    ``Phi`` and ``sign(c) pi pi^T`` is at most ``arcsin r + arcsin(sqrt 2 sin(gamma_v, pi))``.

    Among the saves in ``[t_from, t_to]`` (from the save nearest the saddle to the departure)
    the one with the smallest bound is read (the bound uses ``W0`` and the attention
    amplitude, not ``Phi``).
    Returns a dict: ``time``, ``angle`` (``arccos`` of the signed cosine: ``pi`` when ``Phi``
    points along ``-sign(c) pi pi^T``), ``bound`` (``nan`` where ``r`` or ``nu`` leave no
    bound), ``embedding_offset`` ``e``, ``attention_ratio`` ``nu``, ``saddle_sin``."""
    ts = np.asarray(ts, float)
    W0, WQ, WK = (np.asarray(x, float) for x in (W0, WQ, WK))
    pi = np.asarray(pi, float)
    _, g_v = _profile(saddle_W0, pi)
    s = 1.0 if c >= 0 else -1.0
    sel = np.nonzero((ts >= t_from) & (ts <= t_to))[0]
    nan = {"time": np.nan, "angle": np.nan, "bound": np.nan}
    if sel.size == 0 or not np.isfinite(t_from):
        return dict(nan, embedding_offset=np.nan, attention_ratio=np.nan, saddle_sin=np.nan)
    i0 = sel[0] if t_noise is None else int(np.argmin(np.abs(ts - t_noise)))
    N = float(np.sqrt(np.sum(WQ[i0] ** 2) + np.sum(WK[i0] ** 2)))
    saddle_sin = _sin(g_v, pi)
    gv = float(np.linalg.norm(g_v))
    best = None
    for i in sel:
        alpha, _ = _profile(W0[i], pi)
        e = float(np.linalg.norm(W0[i] - np.outer(g_v, alpha))) / gv
        # the two attention modes at the saddle (WK = +WQ: Phi along +gamma gamma^T, WK = -WQ:
        # along -gamma gamma^T; eigenvalues +c and -c): the one growing at this save (its
        # log-amplitude rising faster since the previous save) is the unstable mode, whichever
        # its sign (a sign other than c's is what the angle then shows); the other one, a
        # stable-direction part of Phi that condensation may have left large, counts with the
        # part that does not grow
        q, q_other = _attention_modes(alpha, WQ[i], WK[i], WQ[max(i - 1, 0)], WK[max(i - 1, 0)])
        nu = (N + q_other) / q if q > 0 else np.inf
        denom = 1.0 - 2.0 * nu - nu * nu
        r = (2 * e + e * e) * (1 + nu) ** 2 / denom if denom > 0 else np.inf
        bound = (
            float(np.arcsin(r) + np.arcsin(min(1.0, np.sqrt(2.0) * saddle_sin)))
            if r < 1
            else np.inf
        )
        if best is None or bound < best[0]:
            best = (bound, i, e, nu)
    bound, i, e, nu = best
    Phi = W0[i] @ WQ[i] @ WK[i].T @ W0[i].T
    pp = np.outer(pi, pi)
    cos = s * float(np.sum(Phi * pp)) / (np.linalg.norm(Phi) * np.linalg.norm(pp) + 1e-300)
    return {
        "time": float(ts[i]),
        "angle": _angle(cos),
        "bound": bound if np.isfinite(bound) else np.nan,
        "embedding_offset": e,
        "attention_ratio": nu,
        "saddle_sin": saddle_sin,
    }


def dilution_mode_growth(ts, gamma, pi, saddle_W0, focus_rate_path, c: float, t_from, t_to):
    """The growth rate of the dilution mode ``D = (1 - pi_1) gamma_1 - pi_1 sum_{i != 1}
    gamma_i`` out of the unigram saddle: the least-squares slope of ``log(D(t) - D_v)`` (``D_v``
    the visited saddle's value, root-found) on the saves in ``[t_from, t_to]`` where the excess
    is positive (from the saddle to the departure: attention in its linear growth);
    ``gamma`` the saved profiles (``metrics["gamma"]``), ``saddle_W0`` the visited saddle's
    embedding.

    Returns a dict: ``rate``, ``half_rates`` (the slopes over the window's two halves), ``n``
    (saves), ``rate_error`` (``max |k(t) - c|`` over the window: the attention grows at the
    instantaneous rate ``k = focus_rate_path``, not exactly at ``c``)."""
    ts = np.asarray(ts, float)
    excess = _dilution_mode(gamma, pi) - float(_dilution_mode(_profile(saddle_W0, pi)[1], pi))
    k = np.asarray(focus_rate_path, float)
    sel = np.nonzero((ts >= t_from) & (ts <= t_to) & (excess > 0) & np.isfinite(excess))[0]
    out = {"rate": np.nan, "half_rates": [np.nan, np.nan], "n": int(sel.size)}
    if sel.size < 6:
        return dict(out, rate_error=np.nan)

    def slope(idx):
        return float(np.polyfit(ts[idx], np.log(excess[idx]), 1)[0])

    h = sel.size // 2
    return {
        "rate": slope(sel),
        "half_rates": [slope(sel[:h]), slope(sel[h:])],
        "n": int(sel.size),
        "rate_error": float(np.max(np.abs(k[sel] - c))),
    }
