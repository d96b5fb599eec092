"""Real text on a fresh machine: packaged excerpts, the corpus search order, checked fetches."""

import dataclasses
import hashlib
import json
import zipfile

import pytest
from conftest import SHARED_DATA

from jaxdyn.cli import main
from jaxdyn.data import (
    CORPORA,
    FetchError,
    excerpt_path,
    fetch_corpus,
    load_text,
    locate_corpus,
)
from jaxdyn.data._corpora import corpus_path


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv("JAXDYN_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # the default cache, ~/.cache/jaxdyn/data
    return tmp_path


def test_excerpts_ship_with_the_package_and_are_real_text(clean_env):
    wiki = load_text("wikitext-2")
    assert locate_corpus("wikitext-2")[1] == "excerpt"
    assert wiki.startswith(" \n = Homarus gammarus = \n")
    assert 250_000 < len(wiki.encode()) < 350_000
    assert wiki.count("\n = ") >= 10 and wiki.endswith(" \n \n")  # cut at an article boundary
    stories = load_text("tinystories")
    assert stories.count("<|endoftext|>") == 5
    for name in CORPORA:
        assert (excerpt_path(name).parent / "README.md").read_text().count("icence") >= 1
    full = SHARED_DATA / "wikitext-2" / "valid.txt"
    if full.is_file():  # the excerpt is an unchanged prefix of the full split
        assert full.read_bytes().startswith(excerpt_path("wikitext-2").read_bytes())


def test_search_order_is_data_dir_then_cache_then_excerpt(clean_env, monkeypatch):
    data = clean_env / "data" / "wikitext-2"
    cache = clean_env / ".cache" / "jaxdyn" / "data" / "wikitext-2"
    cache.mkdir(parents=True)
    (cache / "wiki.valid.raw").write_text("cached")
    assert locate_corpus("wikitext-2") == (cache / "wiki.valid.raw", "cache")
    data.mkdir(parents=True)
    (data / "valid.txt").write_text("mine")
    monkeypatch.setenv("JAXDYN_DATA", str(clean_env / "data"))  # the library reads no env
    assert locate_corpus("wikitext-2") == (cache / "wiki.valid.raw", "cache")
    mine = clean_env / "data"
    assert locate_corpus("wikitext-2", data_dir=mine) == (data / "valid.txt", "data_dir")
    assert load_text("wikitext-2", data_dir=mine) == "mine"
    own = clean_env / "own.txt"
    own.write_text("a file")
    assert corpus_path(str(own)) == own
    with pytest.raises(ValueError, match="neither a file nor a known corpus"):
        corpus_path("no-such-corpus")


def _zip_with(path, member, text):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, text)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _spec(tmp_path, **changes):
    archive = tmp_path / "corpus.zip"
    digest = _zip_with(archive, "raw/wiki.valid.raw", " = Title = \n text \n")
    spec = dataclasses.replace(
        CORPORA["wikitext-2"],
        urls=(archive.as_uri(),),
        sha256=digest,
        size=archive.stat().st_size,
    )
    return dataclasses.replace(spec, archive_member="raw/wiki.valid.raw", **changes)


def test_fetch_extracts_a_verified_archive_atomically(tmp_path):
    spec = _spec(tmp_path)
    target = fetch_corpus(spec, destination=tmp_path / "out", log=lambda m: None)
    assert target == tmp_path / "out" / "wiki.valid.raw"
    assert target.read_text() == " = Title = \n text \n"
    record = json.loads((tmp_path / "out" / "fetched.json").read_text())
    assert record["sha256"] == spec.sha256 and record["url"] == spec.urls[0]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fetched.json", target.name]


def test_fetch_refuses_a_wrong_checksum_and_falls_back_to_the_next_url(tmp_path):
    good = _spec(tmp_path)
    bad = dataclasses.replace(good, sha256="0" * 64)
    with pytest.raises(FetchError, match="differs from the published"):
        fetch_corpus(bad, destination=tmp_path / "bad", log=lambda m: None)
    assert list((tmp_path / "bad").iterdir()) == []  # nothing half-written
    missing = (tmp_path / "missing.zip").as_uri()
    both = dataclasses.replace(good, urls=(missing, good.urls[0]))
    target = fetch_corpus(both, destination=tmp_path / "two", log=lambda m: None)
    assert target.read_text().startswith(" = Title")


def test_fetch_without_a_published_digest_checks_size_and_the_recorded_digest(tmp_path):
    plain = tmp_path / "stories.txt"
    plain.write_text("Once upon a time.<|endoftext|>\n")
    spec = dataclasses.replace(
        CORPORA["tinystories"], urls=(plain.as_uri(),), size=plain.stat().st_size
    )
    out = tmp_path / "out"
    assert fetch_corpus(spec, destination=out, log=lambda m: None).read_text() == plain.read_text()
    plain.write_text("Once upon a TIME.<|endoftext|>\n")  # same size, other content
    with pytest.raises(FetchError, match="earlier fetch"):
        fetch_corpus(spec, destination=out, log=lambda m: None)
    wrong_size = dataclasses.replace(spec, size=1)
    with pytest.raises(FetchError, match="size"):
        fetch_corpus(wrong_size, destination=tmp_path / "other", log=lambda m: None)


def test_data_command_lists_corpora_and_rejects_unknown_names(clean_env, capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "wikitext-2" in out and "CC BY-SA 3.0" in out and "excerpt" in out
    assert main(["data", "fetch", "nope"]) == 2
    assert "unknown corpus 'nope'" in capsys.readouterr().err


def test_line_breaks_keep_merge_or_mark_paragraphs(tmp_path):
    """A hard-wrapped text: every line break a <nl> token (keep), none (spaces), or one <par>
    per blank-line paragraph (paragraph); the option is an enum, not a string."""
    from jaxdyn.data import LineBreaks, load_corpus, tokenize

    text = "The licence grants\nyou the right\nto copy.\n\nA second\nparagraph.\n"
    keep = tokenize(text, "plain", line_breaks=LineBreaks.keep)
    spaces = tokenize(text, "plain", line_breaks=LineBreaks.spaces)
    para = tokenize(text, "plain", line_breaks=LineBreaks.paragraph)
    words = [t for t in keep if t != "<nl>"]
    assert keep.count("<nl>") == 5
    assert spaces == words
    assert para == words[:9] + ["<par>"] + words[9:] + ["<par>"]
    assert tokenize("ab\ncd\n", "plain", "char", line_breaks=LineBreaks.spaces) == list("ab cd ")
    with pytest.raises(TypeError, match="LineBreaks"):
        tokenize(text, "plain", line_breaks="spaces")
    path = tmp_path / "wrapped.txt"
    path.write_text(text * 20)
    corpus = load_corpus(path, fmt="plain", line_breaks=LineBreaks.spaces)
    assert "<nl>" not in corpus.vocab
    assert load_corpus(path, fmt="plain").vocab[0] == "<nl>"


def test_the_command_line_passes_jaxdyn_data_as_the_data_dir(clean_env, monkeypatch, capsys):
    mine = clean_env / "data" / "wikitext-2"
    mine.mkdir(parents=True)
    (mine / "valid.txt").write_text("mine")
    monkeypatch.setenv("JAXDYN_DATA", str(clean_env / "data"))
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(row for row in out if row.startswith("wikitext-2"))
    assert "data_dir" in line and str(mine / "valid.txt") in line
