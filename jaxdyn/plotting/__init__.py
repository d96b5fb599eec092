"""Shared figure helpers: time series with stage marks, heatmaps, bands, cones."""

from ._figures import (
    band as band,
    cone_axes as cone_axes,
    heatmap as heatmap,
    mark_stages as mark_stages,
    new_figure as new_figure,
    note_excluded as note_excluded,
    time_series as time_series,
)

__all__ = ["band", "heatmap", "new_figure", "time_series"]
