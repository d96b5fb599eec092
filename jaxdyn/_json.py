"""Values as JSON: NumPy and JAX arrays as (nested) lists, non-finite floats as ``null``
(NaN) or ``"inf"``/``"-inf"``, Enum members by name; one home for summary.json, config.json
and evidence records."""

from __future__ import annotations

import enum
import math
from typing import Any

import numpy as np


def jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic | np.ndarray) or hasattr(value, "__array__"):
        arr = np.asarray(value)
        if arr.dtype == object:
            return [jsonable(v) for v in arr.tolist()]
        if arr.ndim == 0:
            return jsonable(arr.item())
        return [jsonable(v) for v in arr.tolist()]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
