"""The built documentation site: every page renders in headless Chromium, its figures are
visible (loaded, non-zero size), and no link or anchor is broken (slow: builds the site).

Chromium comes from the system (`apt-get install -y chromium`); .ci/run installs it. The link
check reads the built HTML itself, so it also runs where Chromium is missing.
"""

import functools
import html
import html.parser
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
pytestmark = pytest.mark.slow


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links, self.images = set(), [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "img" and attrs.get("src"):
            self.images.append(attrs["src"])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=ROOT,
        env=env,
        check=True,
    )
    return out


def _pages(site: Path) -> list[Path]:
    return sorted(
        p for p in site.rglob("*.html") if p.name != "404.html" and "assets" not in p.parts
    )


def _parse(file: Path) -> _Page:
    page = _Page()
    page.feed(file.read_text())
    return page


def test_no_broken_link_or_missing_figure(site):
    parsed = {file: _parse(file) for file in _pages(site)}
    broken = []
    for file, page in parsed.items():
        for ref in page.links + page.images:
            url = urllib.parse.urlparse(ref)
            if url.scheme or ref.startswith("//") or ref.startswith("mailto:"):
                continue
            target = (file.parent / urllib.parse.unquote(url.path)).resolve() if url.path else file
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{file.relative_to(site)}: {ref} (no {target})")
            elif url.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if url.fragment not in ids:
                    broken.append(f"{file.relative_to(site)}: {ref} (no anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)


_CHECKER = """<!doctype html><html><body><pre id="out">pending</pre><script>
const pages = %s; const results = {};
function next(i) {
  if (i >= pages.length) {
    document.getElementById("out").textContent = JSON.stringify(results); return;
  }
  const frame = document.createElement("iframe");
  frame.style.width = "1200px"; frame.style.height = "800px";
  frame.onload = () => setTimeout(() => {
    const doc = frame.contentDocument;
    const images = Array.from(doc.images).filter(img => !img.closest(".md-header, .md-footer"));
    results[pages[i]] = {
      title: doc.title,
      h1: doc.querySelector("article h1") ? doc.querySelector("article h1").textContent : "",
      text: doc.querySelector("article") ? doc.querySelector("article").innerText.length : 0,
      images: images.map(img => [img.getAttribute("src"),
        img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().width > 0]),
    };
    frame.remove(); next(i + 1);
  }, 200);
  frame.src = pages[i]; document.body.appendChild(frame);
}
next(0);
</script></body></html>"""


def test_every_page_renders_in_chromium_with_its_figures(site):
    chromium = (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )
    if chromium is None:
        pytest.skip("no Chromium: apt-get install -y chromium (the link check above still ran)")
    pages = ["/" + str(p.relative_to(site)) for p in _pages(site)]
    (site / "_checker.html").write_text(_CHECKER % json.dumps(pages))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/_checker.html"
        dom = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--virtual-time-budget=120000",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout
    finally:
        server.shutdown()
    start = dom.index('<pre id="out">') + len('<pre id="out">')
    body = dom[start : dom.index("</pre>", start)]
    results = json.loads(html.unescape(body))
    assert sorted(results) == sorted(pages), "Chromium did not finish every page"
    bad = []
    for page, result in results.items():
        if not result["h1"] or result["text"] < 100:
            bad.append(
                f"{page}: renders no content (h1 {result['h1']!r}, {result['text']} characters)"
            )
        bad += [f"{page}: figure {src} not visible" for src, ok in result["images"] if not ok]
    assert not bad, "\n".join(bad)
    figures = sum(len(r["images"]) for r in results.values())
    assert figures >= 1, "no figure on any page"
