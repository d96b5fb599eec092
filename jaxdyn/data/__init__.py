"""Real text for the experiments: packaged excerpts, full corpora on demand.

```python
from jaxdyn.data import LineBreaks, bigram_chain, load_corpus

corpus = load_corpus("wikitext-2", vocab_size=64, line_breaks=LineBreaks.spaces)
P, pi = bigram_chain(corpus.tokens, corpus.d)   # the corpus's Markov chain
```

Known corpora: ``"wikitext-2"`` (WikiText-2 raw, validation split; CC BY-SA 3.0)
and ``"tinystories"`` (TinyStories V2 validation split; CDLA-Sharing-1.0). Excerpts ship with
the package (``jaxdyn/data/excerpts/``, with their licences); ``jaxdyn data fetch NAME`` downloads
the full file, checked against its SHA-256, into the cache; ``data_dir=`` (on the command
line, ``JAXDYN_DATA``) points at a folder of corpora you manage yourself
(``<folder>/<name>/<file>``).
"""

from ._corpora import (
    CORPORA as CORPORA,
    CorpusSpec as CorpusSpec,
    cache_dir as cache_dir,
    corpus_spec as corpus_spec,
    excerpt_path as excerpt_path,
    load_text as load_text,
    locate_corpus as locate_corpus,
)
from ._fetch import (
    FetchError as FetchError,
    fetch_corpus as fetch_corpus,
)
from ._tokenise import (
    OOV as OOV,
    Corpus as Corpus,
    LineBreaks as LineBreaks,
    bigram_chain as bigram_chain,
    detect_format as detect_format,
    load_corpus as load_corpus,
    medium_frequency_tokens as medium_frequency_tokens,
    stream_windows as stream_windows,
    tokenize as tokenize,
    unigram_frequencies as unigram_frequencies,
)

__all__ = [
    "Corpus",
    "LineBreaks",
    "bigram_chain",
    "load_corpus",
]
