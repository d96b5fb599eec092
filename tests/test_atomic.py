"""Atomic writes: what a run stores reads back as numpy's own formats do."""

import zipfile

import numpy as np

from jaxdyn._atomic import atomic_savez


def test_atomic_savez_reads_back_like_numpys_savez_compressed(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "sweep.final_x": rng.standard_normal((3, 5, 2)).astype(np.float32),  # a dotted key
        "status": np.array([0, 3, 0], np.int64),
        "flags": rng.uniform(size=7) < 0.5,
        "scalar": np.float64(2.5),
        "empty": np.zeros((0, 4)),
    }
    atomic_savez(tmp_path / "ours.npz", **arrays)
    np.savez_compressed(tmp_path / "numpys.npz", **arrays)
    with np.load(tmp_path / "ours.npz") as ours, np.load(tmp_path / "numpys.npz") as numpys:
        assert sorted(ours.files) == sorted(numpys.files) == sorted(arrays)
        for key in arrays:
            assert ours[key].dtype == numpys[key].dtype and ours[key].shape == numpys[key].shape
            np.testing.assert_array_equal(ours[key], numpys[key])
    with zipfile.ZipFile(tmp_path / "ours.npz") as archive:  # compressed, as numpy's
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["numpys.npz", "ours.npz"]  # no temp
