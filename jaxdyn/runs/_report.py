"""One Markdown + HTML report over run directories: figures, scalars, checks, failures."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path
from typing import Any

from .._atomic import atomic_write_text
from ._config import ConfigError


def find_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run directories among ``paths``: each path is a run or a folder holding runs."""
    found: list[Path] = []
    for p in map(Path, paths):
        if (p / "summary.json").exists():
            found.append(p)
        elif p.is_dir():
            children = sorted(c for c in p.iterdir() if (c / "summary.json").exists())
            if not children:
                raise ConfigError(f"{p} holds no jaxdyn run (no summary.json in it or below)")
            found.extend(children)
        else:
            raise ConfigError(f"no such run directory: {p}")
    return found


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        if len(value) > 8:
            return "[" + ", ".join(_fmt(v) for v in value[:8]) + ", ...]"
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _run_sections(run_dir: Path, figures_out: Path) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    config = {}
    if (run_dir / "config.json").exists():
        config = json.loads((run_dir / "config.json").read_text())
    figures = []
    figure_dir = run_dir / "figures"
    for fig in sorted(figure_dir.glob("*.png")) if figure_dir.exists() else []:
        dest = figures_out / run_dir.name / fig.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fig, dest)
        figures.append(dest.relative_to(figures_out.parent).as_posix())
    return {"dir": run_dir, "summary": summary, "config": config, "figures": figures}


def write_report(run_dirs: list[Path], out: str | Path, title: str = "jaxdyn report") -> Path:
    """Write ``report.md`` and ``report.html`` (with copies of all figures) into ``out``."""
    out = Path(out)
    figures_out = out / "figures"
    runs = [_run_sections(d, figures_out) for d in run_dirs]

    total_checks = sum(r["summary"].get("checks_total", 0) for r in runs)
    passed_checks = sum(r["summary"].get("checks_passed", 0) for r in runs)
    md = [f"# {title}", ""]
    md.append(f"{len(runs)} run(s); checks passed: {passed_checks}/{total_checks}.")
    md.append("")
    md.append("| experiment | status | checks | failed members | wall time (s) |")
    md.append("|---|---|---|---|---|")
    for r in runs:
        s = r["summary"]
        md.append(
            f"| [{s['experiment']}](#{r['dir'].name}) | {s.get('status')} | "
            f"{s.get('checks_passed', 0)}/{s.get('checks_total', 0)} | "
            f"{s.get('failed_members', 0)} | {s.get('wall_time_s', '')} |"
        )
    for r in runs:
        s = r["summary"]
        md += [
            "",
            f"## {s['experiment']}",
            "",
            f'<a id="{r["dir"].name}"></a>',
            f"Run directory: `{r['dir']}`; status: **{s.get('status')}**.",
        ]
        if s.get("error"):
            md.append(f"Error: `{s['error']}`")
        cfg = r["config"].get("config", {})
        if cfg:
            md += ["", "Config: " + ", ".join(f"`{k}={_fmt(v)}`" for k, v in cfg.items())]
        if s.get("scalars"):
            md += ["", "| quantity | value |", "|---|---|"]
            md += [f"| {k} | {_fmt(v)} |" for k, v in s["scalars"].items()]
        if s.get("checks"):
            md += ["", "| check | expected | measured | tolerance | passed |"]
            md += ["|---|---|---|---|---|"]
            for c in s["checks"]:
                mark = "yes" if c["passed"] else "**NO**"
                tol = _fmt(c.get("tolerance"))
                if c.get("relative"):
                    tol += " (rel.)"
                md.append(
                    f"| {c['name']} | {_fmt(c['expected'])} | {_fmt(c['measured'])} | "
                    f"{tol} | {mark} |"
                )
        for name, sweep in s.get("sweeps", {}).items():
            if sweep.get("failed"):
                md.append(
                    f"\nSweep `{name}`: {sweep['failed']}/{sweep['members']} member(s) failed "
                    f"and are excluded from summaries and plots ({sweep['status_counts']})."
                )
        for fig in r["figures"]:
            md += ["", f"![{Path(fig).stem}]({fig})"]
    markdown = "\n".join(md) + "\n"
    atomic_write_text(out / "report.md", markdown)
    atomic_write_text(out / "report.html", _markdown_to_html(markdown, title))
    return out


def _inline(text: str) -> str:
    import re

    text = html.escape(text, quote=False)
    text = re.sub(r"`([^`]*)`", r"<code>\1</code>", text)
    text = re.sub(r"\*\*([^*]*)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"\[([^\]]*)\]\(([^)]*)\)", r'<a href="\2">\1</a>', text)
    return text


def _markdown_to_html(markdown: str, title: str) -> str:
    """The small Markdown subset the report uses: headings, tables, images, paragraphs."""
    import re

    body: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip("|").split("|")])
                i += 1
            head, data = rows[0], [r for r in rows[2:]]
            body.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
            for r in data:
                body.append("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>")
            body.append("</table>")
            continue
        image = re.match(r"!\[([^\]]*)\]\(([^)]*)\)", line)
        if image:
            src, alt = html.escape(image.group(2)), html.escape(image.group(1))
            body.append(
                f'<figure><img src="{src}" alt="{alt}"><figcaption>{alt}</figcaption></figure>'
            )
        elif line.startswith("## "):
            body.append(f"<h2>{_inline(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{_inline(line[2:])}</h1>")
        elif line.startswith("<a id="):
            body.append(line)
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
        i += 1
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:3px 8px}"
        "img{max-width:100%}figure{margin:1em 0}"
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
