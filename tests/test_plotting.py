"""Shared figure helpers draw what they are given, label it, and refuse mismatched shapes."""

import numpy as np
import pytest

from jaxdyn.plotting import band, heatmap, new_figure, note_excluded, time_series


def test_time_series_takes_a_mapping_of_labelled_curves():
    t = np.linspace(0.0, 1.0, 11)
    fig, ax = new_figure()
    time_series(ax[0, 0], t, {"loss": t**2, "entropy": np.cos(t)}, stages={"focus": 0.5})
    lines = ax[0, 0].get_lines()
    assert [ln.get_label() for ln in lines[:2]] == ["loss", "entropy"]
    np.testing.assert_array_equal(lines[0].get_ydata(), t**2)
    assert lines[2].get_xdata()[0] == 0.5  # the stage mark


def test_time_series_splits_columns_and_rejects_a_wrong_length():
    t = np.arange(5.0)
    fig, ax = new_figure()
    time_series(ax[0, 0], t, np.stack([t, 2 * t], axis=1), labels=["a", "b"])
    np.testing.assert_array_equal(ax[0, 0].get_lines()[1].get_ydata(), 2 * t)
    with pytest.raises(ValueError, match="curve loss has shape"):
        time_series(ax[0, 0], t, {"loss": np.arange(4.0)})


def test_band_excludes_failed_members_and_says_so():
    x = np.arange(3.0)
    samples = np.array([[1.0, 1.0, 1.0], [3.0, 3.0, 3.0], [1e9, 1e9, 1e9]])
    fig, ax = new_figure()
    band(ax[0, 0], x, samples, ok=[True, True, False], label="runs")
    (line,) = ax[0, 0].get_lines()
    np.testing.assert_allclose(line.get_ydata(), 2.0)
    assert "1 failed excluded" in line.get_label()
    note_excluded(ax[0, 0], 1, 3)
    assert "1/3 failed members excluded" in ax[0, 0].texts[-1].get_text()
    heatmap(ax[0, 0], np.eye(3), xticklabels=list("abc"))
