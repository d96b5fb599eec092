"""The inputs and integrator settings of the paper's rank histograms (transformer_pde.md, "The
paper's numerical experiments"; the construction of the published code).

The published figures (softmax and L2 attention; rows ``V = I`` and ``V = G^T G``; columns
``d = 3, 4, 5``; 100 converged runs per panel) draw everything from NumPy's legacy global
generator:

- ``Q``: ``np.random.seed(40)``, then one ``Q = randn(d // 2, d)`` for each of 300 entries in
  the order ``d = 3`` (x100), ``4`` (x100), ``5`` (x100). ``K = -Q``. The same sequence serves
  softmax and L2, ``V = I`` and ``V`` random.
- ``V`` random: ``np.random.seed(26)`` (softmax) or ``27`` (L2), then ``G = randn(d, d)`` for the
  same 300 entries in the same order, ``V = G^T G``. Run ``r`` of dimension ``d`` uses entry
  ``r`` of that dimension's block.
- ``Sigma_0``: per panel ``np.random.seed(41)``, then for each *attempt* ``S = randn(d, d)``,
  ``Sigma_0 = S S^T`` (no ``1/d``). An attempt that does not converge is set aside and the next
  attempt is paired with the same run index (see :func:`published_rank_attempts`).

:func:`paper_rank_inputs` returns those draws: ``Q, K, V`` per run index and ``Sigma_0`` per
attempt. Two other constructions stay available as options (``construction="per_run"``:
``Q``/``V`` drawn for dimension ``d`` alone after the seed; ``"shared"``: one ``Q`` and one ``V``
for the whole panel), with ``sigma0_norm="dim"`` for ``Sigma_0 = S S^T / d``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

PUBLISHED_DIMS = (3, 4, 5)
PUBLISHED_RUNS = 100
PUBLISHED_SEED_Q = 40
PUBLISHED_SEED_V = {"softmax": 26, "l2": 27}
PUBLISHED_SEED_SIGMA = 41
RANK_ATTENTIONS = ("softmax", "l2")
RANK_VALUES = ("identity", "random")
RANK_CONSTRUCTIONS = ("published", "per_run", "shared")
RANK_SIGMA0_NORMS = ("none", "dim")


def rank_panels(dims: tuple[int, ...] = PUBLISHED_DIMS) -> list[tuple[str, str, int]]:
    """The panels ``(attention, value, d)`` of the two figures in figure order: softmax then L2;
    within each, row ``V = I`` then ``V`` random; within each row, the columns ``dims``."""
    return [(a, v, d) for a in RANK_ATTENTIONS for v in RANK_VALUES for d in dims]


@dataclasses.dataclass(frozen=True)
class RankPanelSettings:
    """The published projected-Euler settings of one histogram panel.

    Attributes:
        dt: Euler step ``h``.
        tol_low: the run has converged when ``|F(Sigma)|_F < tol_low``.
        max_steps: Euler steps before a run counts as not converged.
        attempts: ``Sigma_0`` draws available to the panel.
        tol_high: the run has diverged when ``tr Sigma > tol_high``.
        floor: negative eigenvalues are replaced by ``floor`` after every step.
        threshold: the limiting rank counts eigenvalues above ``threshold``.
    """

    dt: float
    tol_low: float
    max_steps: int
    attempts: int
    tol_high: float = 1e3
    floor: float = 1e-14
    threshold: float = 0.1


# (attention, value) -> (steps for d = 3, 4, 5; tol_low; max_steps; attempts).
_PUBLISHED_SETTINGS = {
    ("softmax", "identity"): ((0.09, 0.05, 0.02), 1e-4, 60_000, 1_000),
    ("softmax", "random"): ((0.09, 0.06, 0.02), 5e-5, 90_000, 10_000),
    ("l2", "identity"): ((0.09, 0.06, 0.02), 1e-4, 60_000, 1_000),
    ("l2", "random"): ((0.15, 0.15, 0.15), 5e-5, 50_000, 1_000),
}


def _check_panel(attention: str, value: str, d: int) -> None:
    if attention not in RANK_ATTENTIONS:
        raise ValueError(f"attention must be one of {RANK_ATTENTIONS}, got {attention!r}")
    if value not in RANK_VALUES:
        raise ValueError(f"value must be one of {RANK_VALUES}, got {value!r}")
    if not isinstance(d, int | np.integer) or d < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")


def published_rank_settings(attention: str, value: str, d: int) -> RankPanelSettings:
    """The published integrator settings of the panel ``(attention, value, d)``, ``d`` in 3..5."""
    _check_panel(attention, value, d)
    if d not in PUBLISHED_DIMS:
        raise ValueError(f"the published settings exist for d in {PUBLISHED_DIMS}, got d={d}")
    steps, tol_low, max_steps, attempts = _PUBLISHED_SETTINGS[(attention, value)]
    return RankPanelSettings(
        dt=steps[PUBLISHED_DIMS.index(d)], tol_low=tol_low, max_steps=max_steps, attempts=attempts
    )


@dataclasses.dataclass(frozen=True)
class PaperRankInputs:
    """Draws of one histogram panel.

    Attributes:
        Q: ``(runs, d // 2, d)``, entry ``r`` for run index ``r``.
        K: ``-Q``.
        V: ``(runs, d, d)``, the identity or ``G_r^T G_r``.
        Sigma0: ``(attempts, d, d)``, the initial covariance of each attempt in order.
    """

    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    Sigma0: np.ndarray


def _blocks(seed: int, d: int, runs: int, shape, construction: str) -> np.ndarray:
    """Draw ``randn(*shape(dim))`` after ``seed``: the published order runs through every
    published dimension (100 entries each); the other constructions draw for ``d`` alone."""
    np.random.seed(seed)
    if construction == "published":
        out = {
            dim: [np.random.randn(*shape(dim)) for _ in range(PUBLISHED_RUNS)]
            for dim in PUBLISHED_DIMS
        }
        return np.stack(out[d][:runs])
    draws = runs if construction == "per_run" else 1
    out = np.stack([np.random.randn(*shape(d)) for _ in range(draws)])
    return np.broadcast_to(out, (runs,) + out.shape[1:]).copy()


def paper_rank_inputs(
    attention: str,
    value: str,
    d: int,
    attempts: int | None = None,
    *,
    runs: int = PUBLISHED_RUNS,
    construction: str = "published",
    sigma0_norm: str = "none",
) -> PaperRankInputs:
    """The draws of the rank-histogram panel ``(attention, value, d)`` (see the module docstring).

    Args:
        attention: ``"softmax"`` or ``"l2"`` (selects the seed of ``V``).
        value: ``"identity"`` (``V = I``) or ``"random"`` (``V = G^T G``).
        d: token dimension (3, 4 or 5 for the published construction).
        attempts: number of ``Sigma_0`` draws; default the panel's published budget.
        runs: run indices (the published figures: 100; at most 100 when published).
        construction: ``"published"``, ``"per_run"`` or ``"shared"``.
        sigma0_norm: ``"none"`` (``S S^T``, published) or ``"dim"`` (``S S^T / d``).

    Returns:
        A :class:`PaperRankInputs` with ``runs`` weight entries and ``attempts`` covariances.
    """
    _check_panel(attention, value, d)
    if construction not in RANK_CONSTRUCTIONS:
        raise ValueError(f"construction must be one of {RANK_CONSTRUCTIONS}, got {construction!r}")
    if sigma0_norm not in RANK_SIGMA0_NORMS:
        raise ValueError(f"sigma0_norm must be one of {RANK_SIGMA0_NORMS}, got {sigma0_norm!r}")
    if construction == "published":
        if d not in PUBLISHED_DIMS:
            raise ValueError(f"the published draws exist for d in {PUBLISHED_DIMS}, got d={d}")
        if not 1 <= runs <= PUBLISHED_RUNS:
            raise ValueError(f"runs must be in 1..{PUBLISHED_RUNS} when published, got {runs}")
    elif runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    if attempts is None:
        default = _PUBLISHED_SETTINGS[(attention, value)][3]
        attempts = max(default, runs)
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")

    Q = _blocks(PUBLISHED_SEED_Q, d, runs, lambda dim: (dim // 2, dim), construction)
    if value == "identity":
        V = np.broadcast_to(np.eye(d), (runs, d, d)).copy()
    else:
        G = _blocks(PUBLISHED_SEED_V[attention], d, runs, lambda dim: (dim, dim), construction)
        V = np.stack([g.T @ g for g in G])
    np.random.seed(PUBLISHED_SEED_SIGMA)
    scale = 1.0 / d if sigma0_norm == "dim" else 1.0
    # One product per draw, as written in the published code (bitwise the same matrices).
    draws = [np.random.randn(d, d) for _ in range(attempts)]
    Sigma0 = np.stack([s @ s.T if scale == 1.0 else scale * (s @ s.T) for s in draws])
    return PaperRankInputs(Q=Q, K=-Q, V=V, Sigma0=Sigma0)


# --- the d = 2 cone pictures (pde-cone) ---------------------------------------------------

CONE_CASES = ("to_zero", "to_line", "two_lines", "blowup", "either")
# "either": a non-normal V (see cone_cases).
EITHER_V = ((0.5, 2.0), (0.0, 2.0))


def cone_cases(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """``Q, K (2, 2)``, ``V (2, 2)`` of the five d = 2 cases (transformer_pde.md, cone pictures).

    ``to_line`` uses ``Q = [q; 0]`` so every variant (incl. 2-head multi-head, one row per
    head) sees the same rows. ``two_lines`` and ``either`` share ``A = K^T Q / sqrt(2) =
    diag(1, -1)``, whose isotropic lines ``x^T A x = 0`` are ``(1, 1)`` and ``(1, -1)``.
    [derived] On rank-one ``Sigma = x x^T`` the flow is ``x' = (x^T A x) V x``, so:

    - the rank-one matrices on an isotropic line ``e`` are equilibria, linearly stable iff
      ``kappa = (e^T A f)(f^T V e) < 0`` (``f`` orthogonal to ``e``; the Jacobian off the line
      has the double eigenvalue ``2 p kappa`` at ``p e e^T``):
      :func:`jaxdyn.meanfield.isotropic_line_stability`;
    - along a real eigenvector ``u`` of ``V`` (eigenvalue ``lam``) the direction is fixed and
      ``|x|`` blows up in finite time iff ``(u^T A u) lam > 0``; it attracts nearby
      directions iff ``(u^T A u) d/dtheta (e_theta^perp . V e_theta) < 0`` at ``u``.

    With ``V = I`` every direction is fixed, so any positive eigenvalue of ``A + A^T`` blows
    up: neither "two lines" nor "either" exist for V = I, and both cases need their own V.

    - ``two_lines``: ``V = diag(-1, 1)`` (``V A = -I``). Both lines are stable (``kappa = -1``)
      and neither eigenvector of V blows up. The flow is ``a' = -2 (a^2 - c^2)``,
      ``b' = -2 (b^2 - c^2)``, ``c' = 0``: every run converges, to ``|c0| (1, s)(1, s)^T`` with
      ``s = sign(c0)`` (``c0 = 0`` decays to 0 like 1/t):
      :func:`jaxdyn.meanfield.two_lines_covariance`.
    - ``either``: ``V = EITHER_V = [[0.5, 2], [0, 2]]`` (non-normal, ``V A + A^T V^T``
      indefinite). The line ``(1, -1)`` is stable (``kappa = -1.75``), ``(1, 1)`` unstable
      (``kappa = 0.25``); the eigenvector ``(4, 3)`` of ``V`` (eigenvalue 2,
      ``u^T A u > 0``) is an attracting blow-up direction, while the eigenvector ``(1, 0)``
      (eigenvalue 0.5) repels. Starts are split between blowing up along ``(4, 3)`` (disk
      point ``(0.28, 0.96)``) and converging to the line ``(1, -1)`` (disk point ``(0, -1)``).
      (A diagonal ``V`` gives no open blow-up basin: with ``0 < v1 < v2`` only the axis
      ``c = 0`` blows up, and nearby runs converge to a line with a huge trace.)
    """
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((2, 2))
    q = np.array([[1.0, 0.5], [0.0, 0.0]])
    # K^T Q / sqrt(2) = diag(1, -1) with Q = I.
    K_indef = np.sqrt(2.0) * np.diag([1.0, -1.0])
    cases = {
        "to_zero": dict(
            Q=np.array([[1.0, 0.2], [0.3, 0.8]]),
            K=-np.array([[1.0, 0.2], [0.3, 0.8]]),
            V=G @ G.T + 0.1 * np.eye(2),
        ),
        "to_line": dict(Q=q, K=-q, V=np.eye(2)),
        "two_lines": dict(Q=np.eye(2), K=K_indef, V=np.diag([-1.0, 1.0])),
        "blowup": dict(
            Q=np.array([[1.0, 0.3], [0.0, 0.7]]), K=np.array([[1.0, 0.0], [0.2, 0.9]]), V=np.eye(2)
        ),
        "either": dict(Q=np.eye(2), K=K_indef, V=np.array(EITHER_V)),
    }
    return cases
