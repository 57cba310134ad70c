"""The reference for RETURNN configs: RETURNN's own dataset and batches, built as its engine builds
them (``returnn.__main__.load_data`` with its train/dev defaults, ``init_dataset`` for
``eval_datasets``; then ``ReturnnDatasetIterDataPipe`` -> ``LenFilterDataPipe`` ->
``ChunkingIterDataPipe`` -> batching). Import only after ``pytest.importorskip("returnn...")``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def returnn_dataset(cfg: Any, name: str) -> Iterator[Any]:
    """RETURNN's dataset ``name`` of the loaded config ``cfg``, inside ``cfg``'s global context."""
    from returnn.__main__ import load_data
    from returnn.config import global_config_ctx
    from returnn.datasets.basic import Dataset, init_dataset

    with global_config_ctx(cfg):
        if name == "train":
            dataset, _ = load_data(cfg, 0, name, **Dataset.get_default_kwargs_train(config=cfg))
        elif name in ("dev", "eval"):
            dataset, _ = load_data(cfg, 0, name, **Dataset.get_default_kwargs_eval(config=cfg))
        else:
            opts = cfg.typed_value("eval_datasets")[name]
            dataset = init_dataset(opts, default_kwargs={"name": name})
        yield dataset
        if hasattr(dataset, "_finalize"):
            dataset.finalize()


def epoch_batches(cfg: Any, dataset: Any, name: str, epoch: int) -> Iterable[list[dict]]:
    """RETURNN's batches of one (sub-)epoch, each a list of its sequences' dicts."""
    from returnn.torch.data import pipeline
    from returnn.torch.data import returnn_dataset_wrapper as wrapper

    dataset.init_seq_order(epoch=epoch)
    pipe = wrapper.ReturnnDatasetIterDataPipe(
        dataset, reset_callback=wrapper.ReturnnDatasetResetNoOpCallback()
    )
    min_len = cfg.typed_value("min_seq_length", None)
    max_len = cfg.typed_value("max_seq_length", None)
    if min_len is not None or max_len is not None:  # as RETURNN's torch engine
        pipe = pipeline.LenFilterDataPipe(pipe, min_seq_length=min_len, max_seq_length=max_len)
    if cfg.typed_value("chunking", None):
        pipe = pipeline.ChunkingIterDataPipe(
            pipe, cfg.typed_value("chunking"), min_chunk_size=cfg.typed_value("min_chunk_size", 0)
        )
    return pipeline.get_batching_iterable_dataset_from_config(
        dataset=pipe, config=cfg, train=name == "train"
    )
