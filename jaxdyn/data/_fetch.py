"""Download a full corpus into the cache: checked, extracted, written atomically.

``jaxdyn data fetch NAME`` calls :func:`fetch_corpus`. Each URL of the corpus is tried in turn;
a download counts only if its SHA-256 equals the published one (or, for a corpus without a
published digest, its size is the known one and its digest equals the one recorded by an
earlier fetch). Nothing half-downloaded is ever left in the cache.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import shutil
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from .._atomic import atomic_write_bytes, atomic_write_text
from ._corpora import CorpusSpec, cache_dir, corpus_spec

_CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A corpus could not be fetched from any of its URLs (the message says why, per URL)."""


def sha256_of(path: str | Path) -> str:
    """The SHA-256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _download(url: str, dest: Path, timeout: float) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": "jaxdyn-data-fetch"})
    with urllib.request.urlopen(request, timeout=timeout) as response, open(dest, "wb") as out:
        shutil.copyfileobj(response, out, _CHUNK)


def _record_path(folder: Path) -> Path:
    return folder / "fetched.json"


def verify_download(spec: CorpusSpec, path: Path, recorded: str | None = None) -> str:
    """Check a downloaded file against ``spec``; return its SHA-256.

    With a published digest, the digest must equal it. Without one, the size must equal
    ``spec.size`` (when known) and the digest must equal ``recorded`` (the digest of an earlier
    fetch, when there was one). Raises :class:`FetchError` otherwise.
    """
    digest = sha256_of(path)
    size = path.stat().st_size
    if spec.sha256 is not None:
        if digest != spec.sha256:
            raise FetchError(f"SHA-256 {digest} differs from the published {spec.sha256}")
        return digest
    if spec.size is not None and size != spec.size:
        raise FetchError(f"size {size} bytes differs from the known {spec.size}")
    if recorded is not None and digest != recorded:
        raise FetchError(f"SHA-256 {digest} differs from the earlier fetch's {recorded}")
    return digest


def extract_member(spec: CorpusSpec, download: Path) -> bytes:
    """The corpus file's bytes: the zip member ``spec.archive_member``, or the download."""
    if spec.archive_member is None:
        return download.read_bytes()
    try:
        with zipfile.ZipFile(download) as archive:
            return archive.read(spec.archive_member)
    except (zipfile.BadZipFile, KeyError) as err:
        raise FetchError(f"no {spec.archive_member} in the archive: {err}") from None


def fetch_corpus(
    name: str | CorpusSpec,
    *,
    destination: str | Path | None = None,
    timeout: float = 60.0,
    log=print,
) -> Path:
    """Download corpus ``name`` into ``destination`` (default: the cache) and return its file.

    Tries each URL of the corpus in turn; raises :class:`FetchError` listing every URL's
    failure when none gives a verified download. Re-running after success re-downloads and
    re-verifies (the recorded digest must then match).
    """
    spec = name if isinstance(name, CorpusSpec) else corpus_spec(name)
    folder = Path(destination) if destination is not None else cache_dir() / spec.name
    folder.mkdir(parents=True, exist_ok=True)
    record_file = _record_path(folder)
    recorded = json.loads(record_file.read_text()).get("sha256") if record_file.exists() else None
    failures = []
    for url in spec.urls:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            download = Path(tmp) / "download"
            try:
                log(f"fetching {spec.name} from {url}")
                _download(url, download, timeout)
                digest = verify_download(spec, download, recorded)
                content = extract_member(spec, download)
            except (OSError, FetchError) as err:
                failures.append(f"{url}: {err}")
                continue
        target = folder / spec.files[0]
        atomic_write_bytes(target, content)
        record = {
            "name": spec.name,
            "url": url,
            "sha256": digest,
            "published_sha256": spec.sha256,
            "fetched": datetime.datetime.now().isoformat(timespec="seconds"),
            "licence": spec.licence,
        }
        atomic_write_text(record_file, json.dumps(record, indent=1))
        log(f"{spec.name}: {len(content):,} bytes -> {target} (SHA-256 of download {digest})")
        return target
    raise FetchError(f"could not fetch {spec.name}: " + "; ".join(failures))
