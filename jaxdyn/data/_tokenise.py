"""Tokenised text: WikiText raw files, TinyStories and plain text, a word-level top-k
vocabulary plus an out-of-vocabulary token (or characters), the empirical bigram chain
``(P, pi)`` of the token stream, and windows of the stream for training.

Nothing is downloaded: the loaders read any local path (:func:`corpus_path` finds the known
corpora).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import re
from pathlib import Path
from typing import Literal

import numpy as np

OOV = "<oov>"
NEWLINE = "<nl>"
PARAGRAPH = "<par>"
EOS = "<eos>"
_TINYSTORIES_SEP = "<|endoftext|>"
_WORD_RE = re.compile(r"\w+(?:'\w+)?|[^\w\s]")

Format = Literal["auto", "wikitext", "tinystories", "plain"]
Level = Literal["word", "char"]


class LineBreaks(enum.Enum):
    """What a tokeniser makes of the text's line breaks.

    - ``keep``: every line break is the token ``<nl>`` (the "whitespace" token of the paper's
      GPT-style tokenisers; right for text whose lines are units, e.g. WikiText paragraphs).
    - ``spaces``: line breaks are spaces; no line-break token at all (a hard-wrapped text,
      e.g. a licence or a book wrapped at 72 columns, reads as running text).
    - ``paragraph``: lines are joined within a paragraph and each blank-line paragraph break is
      the token ``<par>`` (hard-wrapped text that keeps its paragraph structure).
    """

    keep = "keep"
    spaces = "spaces"
    paragraph = "paragraph"


def _units(lines: list[str], line_breaks: LineBreaks, keep_alone) -> list[tuple[str, str | None]]:
    """The text's units with the token that follows each: lines followed by ``<nl>``
    (``keep``), or paragraphs (lines joined by spaces up to a blank line) followed by ``<par>``
    (``paragraph``) or by nothing (``spaces``). ``keep_alone(line)`` marks lines that stay a
    unit of their own (headings, story separators)."""
    if line_breaks is LineBreaks.keep:
        return [(line.strip(), NEWLINE) for line in lines if line.strip()]
    after = PARAGRAPH if line_breaks is LineBreaks.paragraph else None
    units: list[tuple[str, str | None]] = []
    para: list[str] = []

    def close():
        if para:
            units.append((" ".join(para), after))
            para.clear()

    for line in lines:
        stripped = line.strip()
        if not stripped:
            close()
        elif keep_alone(stripped):
            close()
            units.append((stripped, None))
        else:
            para.append(stripped)
    close()
    return units


def detect_format(text: str) -> str:
    """``"tinystories"`` if the text has ``<|endoftext|>`` separators, ``"wikitext"`` if it has
    ``= Title =`` heading lines, else ``"plain"``."""
    if _TINYSTORIES_SEP in text:
        return "tinystories"
    if re.search(r"^ = [^=].* = $", text, flags=re.MULTILINE):
        return "wikitext"
    return "plain"


def tokenize(
    text: str,
    fmt: str,
    level: Level = "word",
    *,
    lowercase: bool = True,
    line_breaks: LineBreaks = LineBreaks.keep,
) -> list[str]:
    """Split ``text`` into tokens.

    Word level: WikiText is already space-tokenised (``@-@`` and ``<unk>`` stay tokens, heading
    lines are dropped); TinyStories and plain text are split into words and punctuation marks,
    stories separated by ``<eos>``. Character level: every character (WikiText's ``<unk>``
    becomes ``<oov>``). Line breaks follow ``line_breaks`` (:class:`LineBreaks`: each one the
    token ``<nl>``, spaces, or a ``<par>`` token per paragraph).
    """
    if not isinstance(line_breaks, LineBreaks):
        raise TypeError(f"line_breaks must be a LineBreaks member, got {line_breaks!r}")
    if fmt not in ("wikitext", "tinystories", "plain"):
        raise ValueError(f"format must be 'wikitext', 'tinystories' or 'plain', got {fmt!r}")
    if level not in ("word", "char"):
        raise ValueError(f"level must be 'word' or 'char', got {level!r}")
    if lowercase:
        text = text.lower()
    sep = _TINYSTORIES_SEP.lower() if lowercase else _TINYSTORIES_SEP
    out: list[str] = []

    def heading(line: str) -> bool:
        return fmt == "wikitext" and re.fullmatch(r"(= )+[^=].*( =)+", line) is not None

    for stripped, after in _units(
        text.split("\n"), line_breaks, lambda line: line == sep or heading(line)
    ):
        if heading(stripped):
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
        if after is not None:
            out.append(after)
        elif level == "char":
            out.append(" ")
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
    data_dir: str | Path | None = None,
    fmt: Format = "auto",
    level: Level = "word",
    vocab_size: int = 32,
    max_tokens: int | None = None,
    max_chars: int | None = None,
    include: tuple[str, ...] = (),
    lowercase: bool = True,
    drop_oov: bool = False,
    missing: Literal["raise", "skip"] = "raise",
    line_breaks: LineBreaks = LineBreaks.keep,
) -> Corpus:
    """Read ``path`` (a text file, or a known corpus's name such as ``"wikitext-2"``: its full
    file in ``data_dir`` or the cache when there, else the packaged excerpt), tokenise it and
    map tokens to the ``vocab_size - 1`` most frequent ones
    plus ``OOV`` (ties broken alphabetically, so the vocabulary is deterministic).

    ``include`` adds tokens to the vocabulary even if they are rarer (e.g. a medium-frequency
    query word; ``d`` grows by those not already in it). ``max_chars`` reads only the lines that
    fit in the first ``max_chars`` characters; ``max_tokens`` keeps the first tokens.
    ``drop_oov`` removes the out-of-vocabulary tokens from the stream (the vocabulary is then
    real tokens only and bigrams skip over the removed ones). ``missing``: an ``include``d
    token absent from the text raises (``"raise"``) or is listed in ``Corpus.missing``.
    ``line_breaks``: a :class:`LineBreaks` (each line break the token ``<nl>``, the default;
    spaces; or one ``<par>`` per paragraph: for hard-wrapped text).
    """
    from ._corpora import corpus_path  # a name -> its file; a path as given (ValueError, one line)

    path = corpus_path(path, data_dir=data_dir)
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    text = path.read_text(encoding="utf-8", errors="replace")
    if max_chars is not None and len(text) > max_chars:
        text = text[: text.rfind("\n", 0, max_chars) + 1]
    detected = detect_format(text) if fmt == "auto" else fmt
    toks = tokenize(text, detected, level, lowercase=lowercase, line_breaks=line_breaks)
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
