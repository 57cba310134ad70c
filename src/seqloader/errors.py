"""Error types. Every error names what is wrong, where (file, sequence index and tag, option) and the fix.

They subclass ``ValueError``/``RuntimeError`` so generic handlers still catch them, and one common base
so a trainer can catch everything seqloader raises in one ``except``.
"""

from __future__ import annotations

from collections.abc import Sequence

#: How many examples (sequences, batches, messages) an error, a warning or a report lists.
EXAMPLES = 5


def sequence_named(index: int, tags: Sequence[str] | None, origin: str = "") -> str:
    """How an error names sequence ``index``: its index, its tag and where it is read from
    (``origin``, if known); without ``tags`` (planning from lengths alone) ``#index`` stands for
    the tag.

    >>> sequence_named(2, ["a", "b", "c"], "train.hdf"), sequence_named(2, None)
    ("sequence 2 (tag 'c') in train.hdf", "sequence 2 (tag '#2')")
    """
    tag = tags[index] if tags is not None else f"#{index}"
    where = f" in {origin}" if origin else ""
    return f"sequence {index} (tag {tag!r}){where}"


class SeqLoaderError(Exception):
    """Base class of all errors raised by seqloader.

    >>> try:
    ...     sl.WorkerOptions(num_workers=-1)
    ... except sl.SeqLoaderError as e:  # every error seqloader raises
    ...     print(type(e).__name__)
    OptionError
    """


class OptionError(SeqLoaderError, ValueError):
    """An option is out of range, unknown or inconsistent ("got X, expected Y").

    >>> try:
    ...     sl.WorkerOptions(num_workers=-1)
    ... except OptionError as e:
    ...     print(str(e).startswith("num_workers: got -1"), isinstance(e, ValueError))
    True True
    """


class DataError(SeqLoaderError, ValueError):
    """The data itself is broken: a missing/corrupt file, inconsistent lengths, a bad sequence.

    >>> src = sl.MemorySource({"x": [np.zeros((2, 1), "float32")] * 2}, tags=["a", "a"])
    >>> try:
    ...     sl.SeqLoader(src, max_seqs=2)
    ... except DataError as e:
    ...     print("repeat a tag" in str(e), "Fix:" in str(e))
    True True
    """


class SequenceTooLongError(DataError):
    """A sequence cannot fit a batch under ``max_frames`` even alone.

    >>> err = SequenceTooLongError("sequence 3 (tag 'a/3') has 900 frames, max_frames=500")
    >>> isinstance(err, DataError)  # caught with the other data errors
    True
    """


class SequenceSkipped(DataError):
    """Raised by a source's ``read`` for a sequence it was told to skip (e.g. ``on_error="skip"``).

    The batch is executed without that sequence (it holds one fewer), and the message is counted in
    the epoch report's ``skipped`` — never silent (C6). Any other error still fails the batch.

    >>> class Flaky(sl.MemorySource):
    ...     def read(self, index):
    ...         if index == 1:
    ...             raise SequenceSkipped("sequence 1 (tag 'b'): unreadable")
    ...         return super().read(index)
    >>> src = Flaky({"x": [np.zeros((2, 1), "float32")] * 3}, tags=["a", "b", "c"])
    >>> loader = sl.SeqLoader(src, max_seqs=3)
    >>> [batch.seq_tags for batch in loader.epoch(1)], loader.report().skipped
    ([['a', 'c']], 1)
    """


class ResumeError(SeqLoaderError, ValueError):
    """A loader state cannot be applied to this loader (other data, other options, bad format).

    >>> src = sl.MemorySource({"x": [np.zeros((2, 1), "float32")] * 4})
    >>> state = sl.SeqLoader(src, max_seqs=2, seed=1).state_dict()
    >>> try:
    ...     sl.SeqLoader(src, max_seqs=2, seed=2).load_state_dict(state)  # other seed: other plans
    ... except ResumeError:
    ...     print("refused")
    refused
    """


class DistributedMismatchError(SeqLoaderError, RuntimeError):
    """Ranks disagree on the data or the options: they would train on different epochs.

    >>> err = DistributedMismatchError("ranks disagree on the data or the plan: ...")
    >>> isinstance(err, RuntimeError)  # raised on every rank at the first epoch (C7)
    True
    """


class WorkerError(SeqLoaderError, RuntimeError):
    """A DataLoader worker failed or died while executing a planned batch.

    Set when known (``seqloader.torch.held_batches``): ``worker_id``, ``pid``, ``epoch``, ``steps``
    (the planned steps it held), ``tags`` (the first tags of the first of them) and ``building``
    (the step it was building when it died).

    >>> err = WorkerError("DataLoader worker 0 (pid 12) of rank 0 died (killed by signal: Killed) ...")
    >>> err.steps = (4, 6)  # set by seqloader: the steps the worker held
    >>> isinstance(err, RuntimeError), err.steps
    (True, (4, 6))
    """

    worker_id: int | None = None
    pid: int | None = None
    epoch: int | None = None
    steps: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()
    building: int | None = None


class FetchError(SeqLoaderError, RuntimeError):
    """A remote file could not be fetched into the local cache (after retries), or its copy did not
    match what the store said (size, ETag). The message names the URL, the attempts and the fix.

    >>> err = FetchError("s3://bucket/a.hdf: 3 attempts failed (timeout). Fix: check the network")
    >>> isinstance(err, RuntimeError)
    True
    """


class AuditError(SeqLoaderError, RuntimeError):
    """The epoch audit (``SeqLoader(audit=True)``) found sequences missing, repeated or unplanned.

    >>> src = sl.MemorySource({"x": [np.zeros((2, 1), "float32")] * 4})
    >>> loader = sl.SeqLoader(src, max_seqs=2, audit=True)  # AuditError if not exactly once
    >>> _ = list(loader.epoch(1))
    >>> loader.report().audit.ok
    True
    """


class DataWarning(UserWarning):
    """The data looks wrong but loading can go on (NaN/Inf features, empty sequences).

    >>> import warnings
    >>> src = sl.MemorySource({"x": [np.zeros((0, 1), "float32"), np.zeros((2, 1), "float32")]})
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = sl.SeqLoader(src, max_seqs=2)  # an empty sequence: checks.empty="warn"
    >>> caught[0].category.__name__
    'DataWarning'
    """


class AuditWarning(UserWarning):
    """A failed epoch audit under ``audit="warn"``.

    >>> sl.CheckOptions(audit="warn").audit  # a failed audit then warns AuditWarning instead
    'warn'
    >>> issubclass(AuditWarning, UserWarning)
    True
    """


class MissingDependencyError(OptionError, ImportError):
    """An optional package is not installed; the message names the extra that installs it.

    An ``OptionError`` (asking for the feature is the option) and an ``ImportError`` (what a
    generic ``except ImportError`` around optional imports expects).

    >>> err = MissingDependencyError("LhotseSource needs the lhotse package: pip install 'seqloader[lhotse]'")
    >>> isinstance(err, ImportError), isinstance(err, OptionError)
    (True, True)
    """
