"""Optional source abilities are declared (protocols, defaults on ``SourceBase``), and a source
written by a user gets the same handling as a built-in one: a batched ``read_many`` keeps the
per-sequence error naming and the ``SequenceSkipped`` accounting, in the trainer and in workers."""

from __future__ import annotations

import numpy as np
import pytest

import seqloader as sl
from conftest import index_corpus, summary
from seqloader.errors import DataError, SequenceSkipped
from seqloader.sources import (
    DeclaresNeeds,
    LoaderNeeds,
    Locates,
    PreparesWorkers,
    ReadsMany,
    Source,
)
from seqloader.sources.base import read_batch, where


class UserSource:
    """A source as a user writes one: no seqloader base class, metadata from a ``MemorySource``,
    ``read`` that skips some sequences (as ``on_error='skip'`` does) and fails on one."""

    def __init__(self, n: int, skip: frozenset[int] = frozenset(), broken: int = -1) -> None:
        inner = index_corpus(n)
        self.keys, self.schema, self.tags = inner.keys, inner.schema, inner.tags
        self.lengths, self.tag, self.fingerprint = inner.lengths, inner.tag, inner.fingerprint
        self._inner, self.skip, self.broken = inner, skip, broken

    def __len__(self) -> int:
        return len(self._inner)

    def read(self, index: int) -> dict[str, np.ndarray]:
        if index in self.skip:
            raise SequenceSkipped(f"sequence {index}: cannot decode (skipped)")
        if index == self.broken:
            raise RuntimeError("checksum mismatch")
        return self._inner.read(index)

    def __repr__(self) -> str:
        return f"UserSource({len(self)})"


class UserSourceReadsMany(UserSource):
    """The same source with a batched read, written the simple way: it stops at the first error."""

    def read_many(self, indices: np.ndarray) -> list[dict[str, np.ndarray]]:
        return [self.read(int(i)) for i in indices]


def delivered(source: Source, num_workers: int) -> tuple[list, list[str], int]:
    """(epoch, step, sequences) per batch, the skip messages, and the report's skip count."""
    with sl.SeqLoader(source, max_seqs=4, num_workers=num_workers) as loader:
        batches = list(loader.epoch(1))
        report = loader.report()
    messages = [m for b in batches for m in b.skipped]
    return summary(batches), messages, report.skipped


def test_user_source_declares_what_it_has():
    plain, many = UserSource(5), UserSourceReadsMany(5)
    assert isinstance(plain, Source) and isinstance(many, Source)
    assert isinstance(many, ReadsMany) and not isinstance(plain, ReadsMany)
    for ability in (Locates, PreparesWorkers, DeclaresNeeds):
        assert not isinstance(plain, ability)
    assert where(plain, 2) == "UserSource(5)"  # the default: the source itself


def test_built_in_sources_get_the_defaults_from_the_base_class():
    src = index_corpus(5)
    assert isinstance(src, sl.sources.SourceBase)
    assert isinstance(src, Locates | PreparesWorkers | DeclaresNeeds)
    assert where(src, 1) == repr(src)
    assert src.loader_needs() == LoaderNeeds()
    src.prepare_workers()  # nothing to do, and no error


@pytest.mark.parametrize("num_workers", [0, 2])
def test_user_read_many_counts_skipped_sequences_like_read(num_workers):
    skip = frozenset({3, 17})
    want = delivered(UserSource(30, skip), num_workers)
    got = delivered(UserSourceReadsMany(30, skip), num_workers)
    assert got == want
    batches, messages, count = got
    assert count == 2 and len(messages) == 2
    assert "sequence 3: cannot decode (skipped)" in messages[0]
    assert sorted(i for _, _, seqs in batches for i in seqs) == sorted(set(range(30)) - skip)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_user_read_many_errors_name_the_sequence_like_read(num_workers):
    texts = []
    for cls in (UserSource, UserSourceReadsMany):
        loader = sl.SeqLoader(cls(20, broken=9), max_seqs=4, num_workers=num_workers)
        with loader, pytest.raises(DataError) as err:
            list(loader.epoch(1))
        texts.append(str(err.value))
    named = "reading sequence 9 (tag 'utt-9') from UserSource(20) failed: RuntimeError: checksum"
    assert all(named in t for t in texts), texts


def test_read_many_fault_of_its_own_propagates():
    """Every sequence reads fine alone: the error is read_many's, and it is not swallowed."""

    class Faulty(UserSource):
        def read_many(self, indices):
            raise RuntimeError("batched decoder state corrupted")

    with pytest.raises(RuntimeError, match="batched decoder state corrupted"):
        read_batch(Faulty(6), np.arange(4), [])


def test_read_many_must_return_one_sequence_per_index():
    class Short(UserSource):
        def read_many(self, indices):
            return [self.read(int(i)) for i in indices[:-1]]

    with pytest.raises(DataError, match=r"read_many returned 3 sequences for 4 indices"):
        read_batch(Short(6), np.arange(4), [])


def test_loader_checks_what_a_source_needs_generically():
    """A source that leaves a key to the transform says so; SeqLoader knows no source option."""

    class NeedsTransform(UserSource):
        def loader_needs(self) -> LoaderNeeds:
            return LoaderNeeds(("data",), "computes 'data' in the transform", "pass one.")

    with pytest.raises(sl.OptionError, match=r"computes 'data'.*no transform is given\. Fix: pass"):
        sl.SeqLoader(NeedsTransform(4), max_seqs=2)
    sl.SeqLoader(NeedsTransform(4), max_seqs=2, transform=lambda seq, rng: seq).close()
