"""``ReturnnVocab``: an ``OggZipDataset`` ``targets={...}`` vocabulary, encoded by RETURNN's own
``Vocabulary.create_vocab`` (word lists, BPE, SentencePieces, characters, UTF-8 bytes), so the
token ids are RETURNN's exactly. Texts are encoded once at open (``AudioSource`` does that in the
main process); the ids then travel with the plan, so workers never need RETURNN."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from seqloader.errors import DataError, OptionError
from seqloader.extras import require

# vocabulary classes that draw random segmentations (a new one per epoch in RETURNN)
RANDOM_VOCABS = ("SamplingBytePairEncoding",)


class ReturnnVocab:
    """RETURNN's vocabulary for ``targets`` options; ``encode`` is its ``get_seq``."""

    def __init__(self, options: dict[str, Any]) -> None:
        vocabulary = require("returnn.datasets.util.vocabulary", "OggZipDataset targets")
        opts = dict(options)
        if opts.get("class") in RANDOM_VOCABS or opts.get("enable_sampling"):
            raise OptionError(
                f"targets {opts!r}: a sampling vocabulary draws another segmentation per epoch "
                "from RETURNN's RandomState in reading order; not supported (ids are encoded once)"
            )
        try:
            self._vocab = vocabulary.Vocabulary.create_vocab(**opts)
        except (TypeError, KeyError) as e:
            raise OptionError(
                f"targets {opts!r}: RETURNN cannot create this vocabulary: {e}"
            ) from e
        self.options = opts
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return int(self._vocab.num_labels)

    def encode(self, text: str) -> np.ndarray:
        try:
            ids = self._vocab.get_seq(text)
        except KeyError as e:
            raise DataError(
                f"text {text!r}: label {e} is not in the RETURNN vocabulary {self._vocab!r} and it "
                "has no unknown label; add it or set 'unknown_label' in targets"
            ) from e
        return np.asarray(ids, dtype=np.int32)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            h = hashlib.sha256(repr(sorted(self.options.items())).encode())
            h.update("\0".join(self._vocab.labels).encode("utf-8", "surrogatepass"))
            self._fingerprint = h.hexdigest()[:32]
        return self._fingerprint

    def __repr__(self) -> str:
        return f"ReturnnVocab({self._vocab!r})"
