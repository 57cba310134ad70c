"""Vocabularies: text -> token ids for a sparse ``classes`` key.

Pluggable through the ``Vocabulary`` protocol; shipped: ``TokenVocab`` (a plain word or character
vocabulary file) and ``SentencePieceVocab`` (when the ``sentencepiece`` package is installed).
Sources encode every text once at open, so token counts are known for planning.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from seqloader.errors import DataError, OptionError
from seqloader.extras import require


@runtime_checkable
class Vocabulary(Protocol):
    """Text -> token ids, for the ``classes`` key of audio sources (``vocab=``).

    >>> isinstance(sl.TokenVocab(("a", "b")), Vocabulary)  # anything with encode() and len()
    True
    """

    def __len__(self) -> int: ...

    def encode(self, text: str) -> np.ndarray:
        """Token ids (int32 ``[n]``); raises ``DataError`` for text it cannot encode."""
        ...

    def fingerprint(self) -> str:
        """Changes when the mapping changes (part of the source fingerprint)."""
        ...


@dataclass(frozen=True)
class TokenVocab:
    """A fixed token list; ``split="word"`` splits text on whitespace, ``"char"`` into characters.

    ``unknown``: the token that stands for anything not in the list; ``None`` makes an unknown
    token an error (naming the token), which is the safe default for character vocabularies.

    >>> vocab = TokenVocab(("<unk>", "hello", "world"), unknown="<unk>")
    >>> vocab.encode("hello there world").tolist(), len(vocab)
    ([1, 0, 2], 3)
    """

    tokens: tuple[str, ...]
    split: str = "word"
    unknown: str | None = None
    _ids: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.split not in ("word", "char"):
            raise OptionError(f"TokenVocab.split: got {self.split!r}, expected 'word' or 'char'")
        ids: dict[str, int] = {}
        for i, t in enumerate(self.tokens):
            if t in ids:
                raise OptionError(f"TokenVocab: token {t!r} appears twice (ids {ids[t]} and {i})")
            ids[t] = i
        if self.unknown is not None and self.unknown not in ids:
            raise OptionError(f"TokenVocab.unknown: got {self.unknown!r}, not one of the tokens")
        object.__setattr__(self, "_ids", ids)

    @classmethod
    def from_file(cls, path: str | os.PathLike, split: str = "word", unknown: str | None = None):
        """One token per line (id = line number, only the newline stripped), or RETURNN's
        vocabulary format: a Python dict literal ``{token: id}`` with ids 0..n-1."""
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.lstrip().startswith("{"):
            mapping = ast.literal_eval(text)
            if not isinstance(mapping, dict) or sorted(mapping.values()) != list(
                range(len(mapping))
            ):
                raise DataError(
                    f"vocabulary {path}: a dict literal must map tokens to ids 0..n-1 "
                    "(each id once)"
                )
            tokens = tuple(t for t, _ in sorted(mapping.items(), key=lambda kv: kv[1]))
        else:
            tokens = tuple(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"))
        return cls(tokens, split, unknown)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> np.ndarray:
        pieces: Sequence[str] = text.split() if self.split == "word" else text
        ids = self._ids
        unk = ids.get(self.unknown) if self.unknown is not None else None
        out = np.empty(len(pieces), dtype=np.int32)
        for k, p in enumerate(pieces):
            i = ids.get(p, unk)
            if i is None:
                raise DataError(
                    f"token {p!r} is not in the vocabulary ({len(self)} {self.split} tokens) and "
                    "no unknown token is set; add it to the vocabulary or set unknown=..."
                )
            out[k] = i
        return out

    def fingerprint(self) -> str:
        h = hashlib.sha256("\0".join((self.split, str(self.unknown), *self.tokens)).encode())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:  # the token list can be long
        return f"TokenVocab({len(self)} {self.split} tokens, unknown={self.unknown!r})"


class SentencePieceVocab:
    """A SentencePiece model (requires the ``sentencepiece`` package). Pickles as the model file's
    bytes, so spawned workers need not see the same file system path.

    >>> import sentencepiece as spm
    >>> spm.SentencePieceTrainer.train(sentence_iterator=iter(["hello world", "hello there"] * 20),
    ...     model_prefix="sp", vocab_size=12, hard_vocab_limit=False, minloglevel=2)
    >>> vocab = SentencePieceVocab("sp.model")
    >>> ids = vocab.encode("hello world")
    >>> ids.dtype.kind, len(ids) > 0
    ('i', True)
    """

    def __init__(self, model_file: str | os.PathLike) -> None:
        with open(model_file, "rb") as f:
            self._model = f.read()
        self._path = os.fspath(model_file)
        self._load()

    def _load(self) -> None:
        sentencepiece = require("sentencepiece", "SentencePieceVocab")
        self._sp = sentencepiece.SentencePieceProcessor(model_proto=self._model)

    def __getstate__(self) -> dict:
        return {"_model": self._model, "_path": self._path}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._load()

    def __len__(self) -> int:
        return int(self._sp.get_piece_size())

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._sp.encode(text, out_type=int), dtype=np.int32)

    def fingerprint(self) -> str:
        return hashlib.sha256(self._model).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"SentencePieceVocab({self._path!r}, {len(self)} pieces)"
