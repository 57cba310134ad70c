"""Published setups whose data options need no new conversion, each as a stand-in config
(tests/returnn_configs/, the source in its header): RETURNN's tags, order, batches and values per
key through its own pipeline, train sub-epochs 1, 2 and a later one, dev, 0 and 2 workers. Their
stand-in data is written here with RETURNN's ``SimpleHDFWriter``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("returnn.torch.data.pipeline")
pytest.importorskip("sentencepiece")
from test_returnn_public_configs import CONFIGS, ours, reference


@pytest.fixture(scope="module")
def voxpopuli(tmp_path_factory) -> Iterator[Path]:
    """Raw audio (1 value a frame) and sparse targets per language, the same tags, in
    ``$SEQLOADER_RETURNN_DATA/voxpopuli``."""
    from returnn.datasets.hdf import SimpleHDFWriter

    from returnn_configs.corpora import corpora_env

    with corpora_env(tmp_path_factory.mktemp("returnn_setups")) as folder:
        rng = np.random.default_rng(11)
        for lang in ("de", "fr"):
            for split, n in (("train", 9), ("dev", 4)):
                paths = [folder / "voxpopuli" / kind / lang for kind in ("audio", "targets")]
                for p in paths:
                    p.mkdir(parents=True, exist_ok=True)
                audio = SimpleHDFWriter(str(paths[0] / f"{split}.hdf"), dim=1, ndim=2)
                targets = SimpleHDFWriter(str(paths[1] / f"{split}.hdf"), dim=30, ndim=1)
                for i in range(n):
                    tag, t = f"{lang}/{split}/{i}", int(rng.integers(800, 6000))
                    x = rng.standard_normal((1, t, 1)).astype("float32")
                    audio.insert_batch(x, [t], [tag])
                    m = max(1, t // 400)
                    y = rng.integers(0, 30, size=(1, m)).astype("int32")
                    targets.insert_batch(y, [m], [tag])
                audio.close()
                targets.close()
        yield folder


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("name,epochs", [("train", (1, 2, 5)), ("dev", (1,))])
def test_voxpopuli_meta_hdf_as_returnn(
    voxpopuli: Path, tmp_path: Path, name: str, epochs: tuple[int, ...], num_workers: int
) -> None:
    config = CONFIGS / "voxpopuli_meta_hdf.config"
    expected_batches, expected_values = reference(str(config), name, epochs)
    got_batches, got_values = ours(config, num_workers, name, epochs, tmp_path)
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values) and expected_values
    for tag, ref in expected_values.items():
        assert set(got_values[tag]) == set(ref) == {"data", "targets"}, tag
        for key, value in ref.items():
            np.testing.assert_array_equal(got_values[tag][key], value, err_msg=f"{tag} {key}")
