"""Gaussian experiments of the mean-field Transformer PDE (transformer_pde.md, "Closed forms"
and "The paper's numerical experiments"), one module each: ``pde-ranks`` (the paper's rank
histograms, certified), ``pde-blowup`` (blow-up times against the closed form), ``pde-cone``
(the d = 2 cone pictures)."""

from . import blowup as blowup, cone as cone, ranks as ranks
