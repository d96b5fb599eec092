"""Real text for focus_dilution.md ("Real text"): WikiText raw files and TinyStories text files,
a word-level top-k vocabulary plus an out-of-vocabulary token (or characters), the empirical
bigram chain ``(P, pi)`` of the token stream, and windows of the stream for training.

Nothing is downloaded: the loaders read any local path.
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
    ``OOV`` last), the detected ``format`` and the ``level``."""

    tokens: np.ndarray
    vocab: tuple[str, ...]
    format: str
    level: str

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
) -> Corpus:
    """Read ``path``, tokenise it and map tokens to the ``vocab_size - 1`` most frequent ones
    plus ``OOV`` (ties broken alphabetically, so the vocabulary is deterministic).

    ``include`` adds tokens to the vocabulary even if they are rarer (e.g. a medium-frequency
    query word; ``d`` grows by those not already in it). ``max_chars`` reads only the lines that
    fit in the first ``max_chars`` characters; ``max_tokens`` keeps the first tokens.
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
    missing = [w for w in include if w not in counts]
    if missing:
        raise ValueError(f"include: {missing} do not occur in the corpus")
    vocab = [w for w, _ in ranked if w != OOV][: vocab_size - 1]
    vocab += [w for w in include if w not in vocab] + [OOV]
    ids = {w: i for i, w in enumerate(vocab)}
    oov = ids[OOV]
    tokens = np.fromiter((ids.get(w, oov) for w in toks), dtype=np.int32, count=len(toks))
    return Corpus(tokens=tokens, vocab=tuple(vocab), format=detected, level=level)


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


def attention_by_token(model, windows, d: int):
    """Empirical token-type attention of a trained model on real windows: for query type ``q``
    (the last input token) the mean attention mass on positions holding key type ``k``,
    ``A[q, k]``, and the mean share of positions holding ``k`` in those windows,
    ``F[q, k]`` (the uniform-attention baseline). Returns ``(A, F, query_counts)``."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(windows)[:, :-1]
    a = jax.vmap(model.attention)(x)
    onehot = jax.nn.one_hot(x, d, dtype=a.dtype)
    mass = jnp.einsum("ns,nsk->nk", a, onehot)
    share = jnp.mean(onehot, axis=1)
    q = jax.nn.one_hot(x[:, -1], d, dtype=a.dtype)
    counts = jnp.sum(q, axis=0)
    denom = jnp.maximum(counts, 1.0)[:, None]
    return (q.T @ mass) / denom, (q.T @ share) / denom, counts


def attention_story(
    weights: np.ndarray, prior: np.ndarray, names, *, threshold: float = 0.1
) -> list[str]:
    """Phases of one query's attention over time (focus_dilution.md, "Real text").

    At each time the attention row ``w(t)`` is compared with the uniform-attention baseline
    ``prior`` (``pi`` for the population model) by entropy: ``H(w) < (1 - threshold) H(prior)``
    is *focus on* the key with the largest gain ``w_k - prior_k``; ``H(w) > (1 + threshold)
    H(prior)`` is *dilution*; otherwise *uniform*. Consecutive repeats are merged.
    """
    w = np.asarray(weights, dtype=float)
    prior = np.asarray(prior, dtype=float)

    def H(p):
        p = p[p > 0]
        return float(-np.sum(p * np.log(p)))

    H0 = H(prior / prior.sum())
    story: list[str] = []
    for row in w:
        if not np.all(np.isfinite(row)):
            break
        h = H(row / max(row.sum(), 1e-300))
        if h < (1 - threshold) * H0:
            k = int(np.argmax(row - prior))
            phase = f"focus on {names[k]!r}"
        elif h > (1 + threshold) * H0:
            phase = "dilution"
        else:
            phase = "uniform"
        if not story or story[-1] != phase:
            story.append(phase)
    return story
