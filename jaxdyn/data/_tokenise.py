"""Tokenised text: WikiText raw files, TinyStories and plain text, a word-level top-k
vocabulary plus an out-of-vocabulary token (or characters), the empirical bigram chain
``(P, pi)`` of the token stream, and windows of the stream for training.

Nothing is downloaded: the loaders read any local path (:func:`corpus_path` finds the known
corpora).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from pathlib import Path
from typing import Literal

import numpy as np

OOV = "<oov>"
NEWLINE = "<nl>"
EOS = "<eos>"
_TINYSTORIES_SEP = "<|endoftext|>"
_WORD_RE = re.compile(r"\w+(?:'\w+)?|[^\w\s]")

Format = Literal["auto", "wikitext", "tinystories", "plain"]
Level = Literal["word", "char"]


def detect_format(text: str) -> str:
    """``"tinystories"`` if the text has ``<|endoftext|>`` separators, ``"wikitext"`` if it has
    ``= Title =`` heading lines, else ``"plain"``."""
    if _TINYSTORIES_SEP in text:
        return "tinystories"
    if re.search(r"^ = [^=].* = $", text, flags=re.MULTILINE):
        return "wikitext"
    return "plain"


def tokenize(text: str, fmt: str, level: Level = "word", *, lowercase: bool = True) -> list[str]:
    """Split ``text`` into tokens.

    Word level: WikiText is already space-tokenised (``@-@`` and ``<unk>`` stay tokens, heading
    lines are dropped); TinyStories and plain text are split into words and punctuation marks,
    stories separated by ``<eos>``. Every line break becomes ``<nl>`` (the "whitespace" token
    of the paper's GPT-style tokenisers). Character level: every character, line breaks as
    ``<nl>`` (WikiText's ``<unk>`` becomes ``<oov>``).
    """
    if fmt not in ("wikitext", "tinystories", "plain"):
        raise ValueError(f"format must be 'wikitext', 'tinystories' or 'plain', got {fmt!r}")
    if level not in ("word", "char"):
        raise ValueError(f"level must be 'word' or 'char', got {level!r}")
    if lowercase:
        text = text.lower()
    sep = _TINYSTORIES_SEP.lower() if lowercase else _TINYSTORIES_SEP
    out: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if fmt == "wikitext" and re.fullmatch(r"(= )+[^=].*( =)+", stripped):
            continue
        if stripped == sep:
            out.append(EOS)
            continue
        if level == "char" and fmt == "wikitext":
            # WikiText's own unknown-word marker is one token, not five characters
            for i, word in enumerate(stripped.split()):
                if i:
                    out.append(" ")
                out.extend([OOV] if word == "<unk>" else list(word))
        elif level == "char":
            out.extend(list(stripped))
        elif fmt == "wikitext":
            out.extend(stripped.split())
        else:
            out.extend(_WORD_RE.findall(stripped))
        out.append(NEWLINE)
    return out


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A tokenised corpus: ``tokens`` (ids into ``vocab``), ``vocab`` (most frequent first,
    ``OOV`` last unless dropped), the detected ``format`` and the ``level``; ``oov_share``: the
    fraction of the tokenised text outside the vocabulary; ``missing``: ``include``d tokens
    that do not occur (with ``missing="skip"``); ``counts``: each vocabulary entry's count."""

    tokens: np.ndarray
    vocab: tuple[str, ...]
    format: str
    level: str
    oov_share: float = 0.0
    missing: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()

    @property
    def d(self) -> int:
        return len(self.vocab)

    def index(self, word: str) -> int:
        """Id of ``word`` (the OOV id if it is not in the vocabulary)."""
        try:
            return self.vocab.index(word)
        except ValueError:
            return self.vocab.index(OOV)


def load_corpus(
    path: str | Path,
    *,
    fmt: Format = "auto",
    level: Level = "word",
    vocab_size: int = 32,
    max_tokens: int | None = None,
    max_chars: int | None = None,
    include: tuple[str, ...] = (),
    lowercase: bool = True,
    drop_oov: bool = False,
    missing: Literal["raise", "skip"] = "raise",
) -> Corpus:
    """Read ``path``, tokenise it and map tokens to the ``vocab_size - 1`` most frequent ones
    plus ``OOV`` (ties broken alphabetically, so the vocabulary is deterministic).

    ``include`` adds tokens to the vocabulary even if they are rarer (e.g. a medium-frequency
    query word; ``d`` grows by those not already in it). ``max_chars`` reads only the lines that
    fit in the first ``max_chars`` characters; ``max_tokens`` keeps the first tokens.
    ``drop_oov`` removes the out-of-vocabulary tokens from the stream (the vocabulary is then
    real tokens only and bigrams skip over the removed ones). ``missing``: an ``include``d
    token absent from the text raises (``"raise"``) or is listed in ``Corpus.missing``.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"corpus_path does not exist or is not a file: {path}")
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    text = path.read_text(encoding="utf-8", errors="replace")
    if max_chars is not None and len(text) > max_chars:
        text = text[: text.rfind("\n", 0, max_chars) + 1]
    detected = detect_format(text) if fmt == "auto" else fmt
    toks = tokenize(text, detected, level, lowercase=lowercase)
    if max_tokens is not None:
        toks = toks[:max_tokens]
    if len(toks) < 2:
        raise ValueError(f"corpus {path} has fewer than 2 tokens")
    counts = collections.Counter(toks)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if lowercase:
        include = tuple(w.lower() for w in include)
    absent = tuple(w for w in include if w not in counts)
    if absent and missing == "raise":
        raise ValueError(f"include: {list(absent)} do not occur in the corpus")
    include = tuple(w for w in include if w in counts)
    vocab = [w for w, _ in ranked if w != OOV][: vocab_size - 1]
    vocab += [w for w in include if w not in vocab] + [OOV]
    ids = {w: i for i, w in enumerate(vocab)}
    oov = ids[OOV]
    tokens = np.fromiter((ids.get(w, oov) for w in toks), dtype=np.int32, count=len(toks))
    oov_share = float(np.mean(tokens == oov))
    if drop_oov:
        tokens = tokens[tokens != oov]
        vocab = vocab[:-1]
        if len(tokens) < 2:
            raise ValueError(f"corpus {path} has fewer than 2 in-vocabulary tokens")
    return Corpus(
        tokens=tokens,
        vocab=tuple(vocab),
        format=detected,
        level=level,
        oov_share=oov_share,
        missing=absent,
        counts=tuple(int(x) for x in np.bincount(tokens, minlength=len(vocab))),
    )


def medium_frequency_tokens(corpus: Corpus, n: int, *, exclude: tuple[str, ...] = ()) -> list[str]:
    """``n`` word tokens of middling frequency in ``corpus`` (around the median rank of its
    vocabulary; letters only, no markers such as ``<nl>``): replacement queries for words a
    corpus lacks."""
    words = [
        (w, c)
        for w, c in zip(corpus.vocab, corpus.counts, strict=True)
        if w.isalpha() and w not in exclude and c > 0
    ]
    words.sort(key=lambda wc: (-wc[1], wc[0]))
    mid = len(words) // 2
    return [w for w, _ in words[mid : mid + n]]


def bigram_chain(
    tokens: np.ndarray, d: int, *, smoothing: float = 1e-3
) -> tuple[np.ndarray, np.ndarray]:
    """Empirical bigram transition matrix and its stationary distribution.

    ``P_ij = (C_ij + smoothing) / sum_k (C_ik + smoothing)`` with ``C_ij`` the count of
    ``i`` followed by ``j`` (additive smoothing keeps every row stochastic and the chain
    irreducible); ``pi`` solves ``pi^T P = pi^T`` (it matches the unigram frequencies up to
    boundary and smoothing effects).
    """
    if smoothing <= 0:
        raise ValueError(f"smoothing must be positive, got {smoothing}")
    tokens = np.asarray(tokens)
    C = np.zeros((d, d))
    np.add.at(C, (tokens[:-1], tokens[1:]), 1.0)
    C += smoothing
    P = C / C.sum(axis=1, keepdims=True)
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1.0))])
    pi = np.abs(pi) / np.abs(pi).sum()
    return P, pi


def unigram_frequencies(tokens: np.ndarray, d: int) -> np.ndarray:
    """Empirical token frequencies."""
    return np.bincount(np.asarray(tokens), minlength=d) / len(tokens)


def stream_windows(tokens: np.ndarray, length: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` distinct windows of ``length`` consecutive tokens at random offsets of the stream
    (inputs ``x_1..x_{length-1}``, target ``x_length``), drawn without replacement; if the
    stream has at most ``n`` windows, every window, in stream order.

    The model's loss sits on the last position only, so each window is one training example:
    drawing with replacement from a small stream repeats some examples and drops others (a
    3.7k-character sample has only ~3.7k windows).
    """
    tokens = np.asarray(tokens)
    if len(tokens) < length:
        raise ValueError(
            f"the corpus has {len(tokens)} tokens, fewer than the window length {length}"
        )
    available = len(tokens) - length + 1
    if n >= available:
        starts = np.arange(available)
    else:
        starts = np.sort(rng.choice(available, size=n, replace=False))
    return tokens[starts[:, None] + np.arange(length)[None, :]].astype(np.int32)
