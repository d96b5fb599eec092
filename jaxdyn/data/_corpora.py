"""The text corpora jaxdyn knows, and where each one is found on this machine.

A corpus is found, in this order:

1. ``<data_dir>/<name>/<file>``, when a ``data_dir`` is given (a folder of full corpora you
   manage yourself; the command line passes ``JAXDYN_DATA``);
2. the cache that ``jaxdyn data fetch <name>`` fills by default (``~/.cache/jaxdyn/data``);
3. the small excerpt shipped inside the package (``jaxdyn/data/excerpts/<name>/``), so that a
   fresh installation runs every experiment without a download.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

_EXCERPTS = Path(__file__).resolve().parent / "excerpts"


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
    """A corpus: its files, where the full version comes from, and its licence.

    Attributes:
        name: the name used everywhere (``"wikitext-2"``, ``"tinystories"``).
        files: file names accepted in a data folder, most complete first.
        excerpt: the packaged excerpt's file name (under ``jaxdyn/data/excerpts/<name>/``).
        urls: download locations of the canonical file or archive, tried in order.
        archive_member: the file inside a zip archive (``None``: the download is the file).
        sha256: the published SHA-256 of the download (``None`` when none is published; the
            fetch then records the digest it saw and checks it on every later use).
        size: the download's size in bytes when known (checked when ``sha256`` is ``None``).
        licence: the licence of the text; attribution: whom to cite.
        format: the text format (``"wikitext"`` or ``"tinystories"``) for tokenisers.
    """

    name: str
    files: tuple[str, ...]
    excerpt: str
    urls: tuple[str, ...]
    archive_member: str | None
    sha256: str | None
    size: int | None
    licence: str
    attribution: str
    format: str


CORPORA: dict[str, CorpusSpec] = {
    "wikitext-2": CorpusSpec(
        name="wikitext-2",
        files=("wiki.valid.raw", "valid.txt"),
        excerpt="valid.txt",
        urls=(
            "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-raw-v1.zip",
            "https://huggingface.co/datasets/ggml-org/ci/resolve/main/wikitext-2-raw-v1.zip",
        ),
        archive_member="wikitext-2-raw/wiki.valid.raw",
        # 4,721,645-byte wikitext-2-raw-v1.zip as mirrored by ggml-org/ci for llama.cpp.
        sha256="ef7edb566e3e2b2d31b29c1fdb0c89a4cc683597484c3dc2517919c615435a11",
        size=4_721_645,
        licence="CC BY-SA 3.0",
        attribution="Merity, Xiong, Bradbury, Socher, Pointer Sentinel Mixture Models (2016)",
        format="wikitext",
    ),
    "tinystories": CorpusSpec(
        name="tinystories",
        files=("TinyStoriesV2-GPT4-valid.txt", "sample.txt"),
        excerpt="sample.txt",
        urls=(
            "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/"
            "TinyStoriesV2-GPT4-valid.txt",
        ),
        archive_member=None,
        sha256=None,
        size=22_502_601,
        licence="CDLA-Sharing-1.0",
        attribution="Eldan and Li, TinyStories (2023)",
        format="tinystories",
    ),
}


def corpus_spec(name: str) -> CorpusSpec:
    """The :class:`CorpusSpec` called ``name``; ``ValueError`` naming the known ones."""
    if name not in CORPORA:
        raise ValueError(f"unknown corpus '{name}'; known corpora: {', '.join(CORPORA)}")
    return CORPORA[name]


def cache_dir() -> Path:
    """Where ``jaxdyn data fetch`` stores full corpora by default: ``~/.cache/jaxdyn/data``."""
    return Path.home() / ".cache" / "jaxdyn" / "data"


def excerpt_path(name: str) -> Path:
    """The packaged excerpt of corpus ``name``."""
    spec = corpus_spec(name)
    return _EXCERPTS / spec.name / spec.excerpt


def _search_dirs(name: str, data_dir: str | os.PathLike | None) -> list[tuple[str, Path]]:
    dirs = []
    if data_dir:
        dirs.append(("data_dir", Path(data_dir) / name))
    dirs.append(("cache", cache_dir() / name))
    return dirs


def locate_corpus(name: str, *, data_dir: str | os.PathLike | None = None) -> tuple[Path, str]:
    """``(path, source)`` of corpus ``name``: ``source`` is ``"data_dir"``, ``"cache"`` or
    ``"excerpt"`` (see the module docstring for the search order)."""
    spec = corpus_spec(name)
    for source, folder in _search_dirs(name, data_dir):
        for file in spec.files:
            if (folder / file).is_file():
                return folder / file, source
    return excerpt_path(name), "excerpt"


def corpus_path(
    name_or_path: str | os.PathLike, *, data_dir: str | os.PathLike | None = None
) -> Path:
    """A text file to read: an existing path as given, or the best copy of a known corpus.

    ``corpus_path("wikitext-2")`` finds the full WikiText-2 validation split when one is
    available (in ``data_dir``, or fetched by ``jaxdyn data fetch``), else the packaged
    excerpt.
    Raises ``ValueError`` (one line) for a name that is neither a file nor a known corpus.
    """
    path = Path(name_or_path)
    if path.is_file():
        return path
    name = str(name_or_path)
    if name not in CORPORA:
        raise ValueError(
            f"corpus '{name}' is neither a file nor a known corpus ({', '.join(CORPORA)})"
        )
    return locate_corpus(name, data_dir=data_dir)[0]


def load_text(
    name_or_path: str | os.PathLike,
    *,
    data_dir: str | os.PathLike | None = None,
    encoding: str = "utf-8",
) -> str:
    """The text of :func:`corpus_path` ``(name_or_path, data_dir=data_dir)``."""
    return corpus_path(name_or_path, data_dir=data_dir).read_text(encoding=encoding)
