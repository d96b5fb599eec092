"""Experiments of the focus-and-dilution theory (focus_dilution.md; arXiv 2605.01199): each is a
config (:mod:`._configs`, no JAX) and a function ``run_*(config, run)`` (config ->
:mod:`jaxdyn.gradflow` -> claims -> figures) in its module, imported when it runs."""

from ...runs import register_experiment
from . import _configs as c

_EXPERIMENTS = (  # name, config, module:function, description, title, docs anchor
    (
        "focus-dilution-ablation",
        c.AblationConfig,
        "ablation:run_ablation",
        "focus and dilution for other transition matrices with the same pi (the paper's ablation)",
        "Ablation: other transition matrices with the same pi",
        "ablation",
    ),
    (
        "focus-dilution-delta",
        c.DeltaConfig,
        "delta:run_delta",
        "symmetry breaking: escape from the rank-one stall vs delta (including 0) and eps",
        "Escape from the rank-one stall against delta and eps",
        "delta-and-eps",
    ),
    (
        "focus-dilution-finite",
        c.FiniteConfig,
        "finite:run_finite",
        "finite-(N, s) gradient descent and Adam approach the population flow along the trajectory",
        "Finite samples against the population flow",
        "finite-sizes",
    ),
    (
        "focus-dilution",
        c.FocusDilutionConfig,
        "headline:run_focus_dilution",
        "population gradient flow on any Markov chain: condensation, focus, dilution, new "
        "direction",
        "Focus and dilution on one Markov chain",
        "headline",
    ),
    (
        "focus-dilution-lyapunov",
        c.LyapunovConfig,
        "lyapunov:run_lyapunov",
        "rank-one critical points vs delta: transverse eigenvalue Theta(delta), tangential "
        "O(delta^2)",
        "Rank-one critical points against delta",
        "lyapunov",
    ),
    (
        "focus-dilution-text",
        c.TextConfig,
        "text:run_text",
        "real text (WikiText / TinyStories): bigram population flow, proxy test, attention stories",
        "Real text: the bigram flow past the departure",
        "real-text",
    ),
    (
        "focus-dilution-tinystories",
        c.TinyStoriesConfig,
        "text:run_text",
        "TinyStories: bigram population flow, proxy test, attention stories of the paper's queries",
        "TinyStories: the paper's queries",
        "real-text",
    ),
)
for _name, _config, _fn, _description, _title, _anchor in _EXPERIMENTS:
    register_experiment(
        _name, _config, _description, title=_title, docs=f"focus_dilution.md#{_anchor}"
    )(f"{__name__}.{_fn}")
