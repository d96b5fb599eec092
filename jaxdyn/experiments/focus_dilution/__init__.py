"""Experiments of the focus-and-dilution theory (focus_dilution.md; arXiv 2605.01199): each is a
config (:mod:`._configs`, no JAX) and a function ``run_*(config, run)`` (config ->
:mod:`jaxdyn.gradflow` -> claims -> figures) in its module, imported when it runs."""

from ...runs import register_experiment
from . import _configs as c

_EXPERIMENTS = (  # name, config, module:function, docs anchor, report title; description
    ("focus-dilution-ablation", c.AblationConfig, "ablation:run_ablation", "ablation",
     "Ablation: other transition matrices with the same pi",
     "focus and dilution for other transition matrices with the same pi (the paper's ablation)"),
    ("focus-dilution-delta", c.DeltaConfig, "delta:run_delta", "delta-and-eps",
     "Escape from the rank-one stall against delta and eps",
     "symmetry breaking: escape from the rank-one stall vs delta (including 0) and eps"),
    ("focus-dilution-finite", c.FiniteConfig, "finite:run_finite", "finite-sizes",
     "Finite samples against the population flow",
     "finite-(N, s) gradient descent and Adam approach the population flow along the trajectory"),
    ("focus-dilution", c.FocusDilutionConfig, "headline:run_focus_dilution", "headline",
     "Focus and dilution on one Markov chain",
     "population gradient flow on any Markov chain: condensation, focus, dilution, new direction"),
    ("focus-dilution-lyapunov", c.LyapunovConfig, "lyapunov:run_lyapunov", "lyapunov",
     "Rank-one critical points against delta",
     "rank-one critical points vs delta: transverse eigenvalue Theta(delta), tangential "
     "O(delta^2)"),
    ("focus-dilution-text", c.TextConfig, "text:run_text", "real-text",
     "Real text: the bigram flow past the departure",
     "real text (WikiText / TinyStories): bigram population flow, proxy test, attention stories"),
    ("focus-dilution-tinystories", c.TinyStoriesConfig, "text:run_text", "real-text",
     "TinyStories: the paper's queries",
     "TinyStories: bigram population flow, proxy test, attention stories of the paper's queries"),
)  # fmt: skip
for _name, _config, _fn, _anchor, _title, _description in _EXPERIMENTS:
    register_experiment(
        _name, _config, _description, title=_title, docs=f"focus_dilution.md#{_anchor}"
    )(f"{__name__}.{_fn}")
