"""Gaussian experiments of the mean-field Transformer PDE (transformer_pde.md, "Closed forms"
and "The paper's numerical experiments"), one module each: ``pde-ranks`` (the paper's rank
histograms, certified), ``pde-blowup`` (blow-up times against the closed form, the general-V
regime criterion), ``pde-cone`` (the d = 2 cone pictures). Their science lives in
``jaxdyn.meanfield``'s private modules."""

from . import blowup as blowup, cone as cone, ranks as ranks
