"""Every registered negative control: an evidence check fed a counterfactual on which its claim
is false must end ``refuted`` or ``inconclusive``, never ``holds``."""

import pytest

from jaxdyn.evidence import Evidence, Verdict
from jaxdyn.runs import list_experiments, negative_controls

list_experiments()  # imports every registered experiment module, which registers its controls
CONTROLS = negative_controls()


@pytest.mark.parametrize("key", sorted(CONTROLS), ids=lambda k: f"{k[0]}:{k[1]}")
def test_counterfactual_is_not_called_holds(key):
    evidence = CONTROLS[key]()
    assert isinstance(evidence, Evidence)
    assert evidence.verdict in (Verdict.refuted, Verdict.inconclusive), evidence
