"""Error types. Every error names what is wrong, where (file, sequence index and tag, option) and the fix.

They subclass ``ValueError``/``RuntimeError`` so generic handlers still catch them, and one common base
so a trainer can catch everything seqloader raises in one ``except``.
"""

from __future__ import annotations

#: How many examples (sequences, batches, messages) an error, a warning or a report lists.
EXAMPLES = 5


class SeqLoaderError(Exception):
    """Base class of all errors raised by seqloader."""


class OptionError(SeqLoaderError, ValueError):
    """An option is out of range, unknown or inconsistent ("got X, expected Y")."""


class DataError(SeqLoaderError, ValueError):
    """The data itself is broken: a missing/corrupt file, inconsistent lengths, a bad sequence."""


class SequenceTooLongError(DataError):
    """A sequence cannot fit a batch under ``max_frames`` even alone."""


class SequenceSkipped(DataError):
    """Raised by a source's ``read`` for a sequence it was told to skip (e.g. ``on_error="skip"``).

    The batch is executed without that sequence (it holds one fewer), and the message is counted in
    the epoch report's ``skipped`` — never silent (C6). Any other error still fails the batch.
    """


class ResumeError(SeqLoaderError, ValueError):
    """A loader state cannot be applied to this loader (other data, other options, bad format)."""


class DistributedMismatchError(SeqLoaderError, RuntimeError):
    """Ranks disagree on the data or the options: they would train on different epochs."""


class WorkerError(SeqLoaderError, RuntimeError):
    """A DataLoader worker failed or died while executing a planned batch.

    Set when known (``seqloader.torch.held_batches``): ``worker_id``, ``pid``, ``epoch``, ``steps``
    (the planned steps it held), ``tags`` (the first tags of the first of them) and ``building``
    (the step it was building when it died)."""

    worker_id: int | None = None
    pid: int | None = None
    epoch: int | None = None
    steps: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()
    building: int | None = None


class FetchError(SeqLoaderError, RuntimeError):
    """A remote file could not be fetched into the local cache (after retries), or its copy did not
    match what the store said (size, ETag). The message names the URL, the attempts and the fix."""


class AuditError(SeqLoaderError, RuntimeError):
    """The epoch audit (``SeqLoader(audit=True)``) found sequences missing, repeated or unplanned."""


class DataWarning(UserWarning):
    """The data looks wrong but loading can go on (NaN/Inf features, empty sequences)."""


class AuditWarning(UserWarning):
    """A failed epoch audit under ``audit="warn"``."""


class MissingDependencyError(OptionError, ImportError):
    """An optional package is not installed; the message names the extra that installs it.

    An ``OptionError`` (asking for the feature is the option) and an ``ImportError`` (what a
    generic ``except ImportError`` around optional imports expects)."""
