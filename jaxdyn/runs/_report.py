"""One Markdown + HTML report over run directories, one section per theory.

Each theory's section has its headline figures, then its verdict table (every evidence check:
claim, prediction, measurement with its error, verdict; findings, i.e. refuted claims, first),
then its consistency checks and reported numbers, then one subsection per experiment (status,
config, scalars, sweeps, the other figures). Tables hold formatted scalars and short arrays;
nested data is left to ``summary.json`` and ``results.npz``.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

from .._atomic import atomic_write_text
from ._config import ConfigError

# (experiment-name prefix, section title, docs page): jaxdyn's theories. An experiment of
# another package is grouped under the package it was registered from.
THEORIES: tuple[tuple[str, str, str], ...] = (
    ("focus-dilution", "Focus and dilution", "docs/focus_dilution.md"),
    ("copy-head", "Copy-head emergence", "docs/copy_head.md"),
    ("pde-", "The Transformer PDE", "docs/transformer_pde.md"),
)
COUNT_KEYS = (
    "evidence",
    "holds",
    "refuted",
    "inconclusive",
    "not_run",
    "findings",
    "without_negative_control",
    "consistency",
    "consistency_failed",
    "report",
    "unclassified",
)


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


def theory_of(experiment: str, module: str = "") -> str:
    """The report section an experiment belongs to: one of :data:`THEORIES` by name, else
    the package it was registered from (``module`` without its last part), else "other"."""
    for prefix, title, _ in THEORIES:
        if experiment.startswith(prefix):
            return title
    if module and not module.startswith("_jaxdyn_import_"):
        return module.rsplit(".", 1)[0] if "." in module else module
    return "other experiments"


@dataclasses.dataclass
class _RunRecord:
    dir: Path
    summary: dict[str, Any]
    config: dict[str, Any]
    figures: list[str]  # paths relative to the report folder

    @property
    def experiment(self) -> str:
        return str(self.summary.get("experiment", self.dir.name))

    @property
    def theory(self) -> str:
        return theory_of(self.experiment, str(self.config.get("module", "")))

    @property
    def anchor(self) -> str:
        return "run-" + re.sub(r"[^A-Za-z0-9_-]", "-", self.dir.name)


def _load(run_dir: Path, report_dir: Path | None) -> _RunRecord:
    summary = json.loads((run_dir / "summary.json").read_text())
    config = {}
    if (run_dir / "config.json").exists():
        config = json.loads((run_dir / "config.json").read_text())
    figures = []
    figure_dir = run_dir / "figures"
    for fig in sorted(figure_dir.glob("*.png")) if figure_dir.exists() else []:
        if report_dir is None:
            figures.append(fig.as_posix())
            continue
        dest = report_dir / "figures" / run_dir.name / fig.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fig, dest)
        figures.append(dest.relative_to(report_dir).as_posix())
    # the experiment's own order of figures (summary.json) puts its headline figure first
    order = {Path(f).stem: i for i, f in enumerate(summary.get("figures", []))}
    figures.sort(key=lambda f: order.get(Path(f).stem, len(order)))
    return _RunRecord(run_dir, summary, config, figures)


def _counts(summary: dict[str, Any]) -> dict[str, int]:
    counts = dict.fromkeys(COUNT_KEYS, 0)
    counts.update({k: int(v) for k, v in summary.get("counts", {}).items() if k in counts})
    return counts


def theory_counts(run_dirs: list[Path]) -> dict[str, dict[str, int]]:
    """Per theory: experiments, complete / failed runs and the summed check counts
    (evidence by verdict, findings, consistency and failures, report, unclassified)."""
    out: dict[str, dict[str, int]] = {}
    for record in (_load(d, None) for d in run_dirs):
        row = out.setdefault(
            record.theory, {"experiments": 0, "complete": 0, **dict.fromkeys(COUNT_KEYS, 0)}
        )
        row["experiments"] += 1
        row["complete"] += record.summary.get("status") == "complete"
        for key, value in _counts(record.summary).items():
            row[key] += value
    return out


def describe_theory_counts(counts: dict[str, int]) -> str:
    """One line of a theory's counts (``jaxdyn report`` prints one per theory)."""
    text = (
        f"{counts['complete']}/{counts['experiments']} complete; evidence {counts['evidence']}"
        f" ({counts['holds']} holds, {counts['refuted']} refuted = findings,"
        f" {counts['inconclusive']} inconclusive, {counts['not_run']} not run); consistency"
        f" {counts['consistency'] - counts['consistency_failed']}/{counts['consistency']}"
        f" passed; report {counts['report']}"
    )
    if counts["unclassified"]:
        text += f"; unclassified {counts['unclassified']}"
    return text


# -- formatting --------------------------------------------------------------------------
def _number(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:  # summary.json writes NaN as null
        return "NaN"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4g}"
    if isinstance(value, str) and value in ("inf", "-inf"):
        return value.replace("inf", "∞")
    return str(value)


def _shape(value: list) -> tuple[int, ...]:
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        value = value[0] if value else None
    return tuple(shape)


def _cell(value: Any, max_items: int = 6) -> str:
    """A table cell: a formatted scalar, a short list, or where the data is (never a dict)."""
    if isinstance(value, dict):
        return f"({len(value)} fields in summary.json)"
    if isinstance(value, list):
        shape = _shape(value)
        if len(shape) > 1:
            return f"array {' x '.join(map(str, shape))} (summary.json)"
        if any(isinstance(v, dict | list) for v in value):
            return f"({len(value)} entries in summary.json)"
        shown = ", ".join(_number(v) for v in value[:max_items])
        return f"[{shown}, ... ({len(value)} values)]" if len(value) > max_items else f"[{shown}]"
    text = _number(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _t_quantile(confidence: float | int, dof: float | int | None) -> float:
    from scipy import stats

    q = 0.5 + confidence / 2
    return float(stats.norm.ppf(q) if dof is None else stats.t.ppf(q, dof))


def _error(model: dict[str, Any]) -> str:
    """An evidence check's error model in words, e.g. "± 0.031 (99% interval, SE 0.011,
    12 dof)"."""
    name, value = model.get("name", ""), model.get("value")
    if name == "exact":
        return "exact"
    if name == "standard_error":
        confidence = float(model.get("confidence") or 0.99)
        dof = model.get("dof")
        if isinstance(value, int | float):
            half = value * _t_quantile(confidence, dof)
            dof_text = f", {_number(dof)} dof" if dof is not None else ""
            return (
                f"± {_number(half)} ({100 * confidence:.3g}% interval, SE {_number(value)}"
                f"{dof_text})"
            )
        return f"SE {_cell(value)} ({100 * confidence:.3g}% interval)"
    label = {"solver_tolerance": "solver tolerance", "derived_bound": "derived bound"}
    return f"± {_cell(value)} ({label.get(name, name)})"


def _escape_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(*cells: str) -> str:
    return "| " + " | ".join(_escape_cell(c) for c in cells) + " |"


_VERDICT_ORDER = {"refuted": 0, "inconclusive": 1, "not_run": 2, "holds": 3}

FINDINGS_EXPLAINED = (
    "A **finding** is a paper claim the simulation refutes: within its error model the"
    " measurement excludes the paper's prediction. Findings do not fail a run; each is listed"
    " with its evidence and discussed on the theory's page. `inconclusive`: the check ran but"
    " could not decide; `not_run`: not run at this size, with the command that runs it."
)


def _verdict_table(records: list[_RunRecord]) -> list[str]:
    rows = [
        (r, c) for r in records for c in r.summary.get("checks", []) if c.get("kind") == "evidence"
    ]
    if not rows:
        return []
    rows.sort(key=lambda rc: _VERDICT_ORDER.get(rc[1].get("verdict"), 3))
    md = [
        "",
        "### Verdicts",
        "",
        _row("experiment", "claim", "prediction", "measurement", "error", "verdict", "why"),
        "|---|---|---|---|---|---|---|",
    ]
    for record, check in rows:
        verdict = check.get("verdict", "")
        shown = {"refuted": "**refuted (finding)**", "not_run": "not run"}.get(verdict, verdict)
        if not check.get("negative_control", True):
            shown += " (no negative control)"
        prediction = _cell(check.get("prediction"))
        if check.get("alternative") is not None:
            prediction += f" (alternative {_cell(check['alternative'])})"
        md.append(
            _row(
                f"[{record.experiment}](#{record.anchor})",
                f"{check.get('claim') or check['name']} (`{check['name']}`)",
                prediction,
                _cell(check.get("measured")),
                _error(check.get("error_model", {})),
                shown,
                (check.get("reason", "") or check.get("note", ""))
                + (f"; run it: `{check['command']}`" if check.get("command") else ""),
            )
        )
    return md


def _consistency_table(records: list[_RunRecord]) -> list[str]:
    rows = [
        (r, c)
        for r in records
        for c in r.summary.get("checks", [])
        if c.get("kind") == "consistency"
    ]
    if not rows:
        return []
    rows.sort(key=lambda rc: bool(rc[1].get("passed")))  # failures (bugs) first
    md = [
        "",
        "### Consistency",
        "",
        _row("experiment", "check", "expected", "measured", "tolerance", "passed"),
        "|---|---|---|---|---|---|",
    ]
    for record, c in rows:
        tolerance = _cell(c.get("tolerance"))
        if c.get("relative"):
            tolerance += " (relative)"
        if c.get("basis"):
            tolerance += f" ({c['basis']})"
        md.append(
            _row(
                record.experiment,
                f"`{c['name']}`",
                _cell(c.get("expected")),
                _cell(c.get("measured")),
                tolerance,
                "yes" if c.get("passed") else "**NO (a bug)**",
            )
        )
    return md


def _report_table(records: list[_RunRecord]) -> list[str]:
    rows = [
        (r, c) for r in records for c in r.summary.get("checks", []) if c.get("kind") == "report"
    ]
    md: list[str] = []
    if rows:
        md += [
            "",
            "### Reported numbers",
            "",
            _row("experiment", "quantity", "measured", "prediction", "note"),
            "|---|---|---|---|---|",
        ]
        for record, c in rows:
            prediction = "" if c.get("prediction") is None else _cell(c["prediction"])
            md.append(
                _row(
                    record.experiment,
                    f"{c.get('claim') or c['name']} (`{c['name']}`)",
                    _cell(c.get("measured")),
                    prediction,
                    c.get("note", ""),
                )
            )
    return md


def _flatten(name: str, value: Any, depth: int = 0) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and depth < 2:
        return [row for k, v in value.items() for row in _flatten(f"{name}.{k}", v, depth + 1)]
    return [(name, value)]


def _scalar_rows(scalars: dict[str, Any], max_rows: int = 12) -> list[tuple[str, str]]:
    """Scalars as (name, cell) rows; a dict is spread over ``name.key`` rows (two levels, at
    most ``max_rows`` per scalar; the rest stays in summary.json)."""
    rows = []
    for name, value in scalars.items():
        flat = _flatten(name, value)
        rows += [(k, _cell(v)) for k, v in flat[:max_rows]]
        if len(flat) > max_rows:
            rows.append((f"{name}.(...)", f"{len(flat) - max_rows} more in summary.json"))
    return rows


def _experiment_section(record: _RunRecord) -> list[str]:
    s = record.summary
    c = _counts(s)
    md = [
        "",
        f"### {record.experiment}",
        "",
        f'<a id="{record.anchor}"></a>',
        f"Run directory `{record.dir}`; status **{s.get('status')}**; evidence {c['evidence']}"
        f" ({c['holds']} holds, {c['refuted']} refuted, {c['inconclusive']} inconclusive,"
        f" {c['not_run']} not run),"
        f" consistency {c['consistency'] - c['consistency_failed']}/{c['consistency']},"
        f" report {c['report']}; wall time {_number(s.get('wall_time_s', 0.0))} s.",
    ]
    if s.get("error"):
        md += ["", f"Error: `{s['error']}`"]
    cfg = record.config.get("config", {})
    if cfg:
        shown = [
            f"`{k}={_cell(v, max_items=4)}`" for k, v in cfg.items() if not isinstance(v, dict)
        ]
        md += ["", "Config: " + ", ".join(shown)]
    if s.get("scalars"):
        md += ["", "| quantity | value |", "|---|---|"]
        md += [_row(k, v) for k, v in _scalar_rows(s["scalars"])]
    for name, sweep in s.get("sweeps", {}).items():
        if sweep.get("failed"):
            counts = ", ".join(f"{k} {v}" for k, v in sweep.get("status_counts", {}).items())
            expected = sweep.get("expected_failures") or {}
            said = "; ".join(
                f"{v['members']} {k}: expected, {v['why']}" for k, v in expected.items()
            )
            unexpected = sweep.get("unexpected_failures")
            md.append(
                f"\nSweep `{name}`: {sweep['failed']}/{sweep['members']} member(s) failed and are"
                f" excluded from summaries and plots ({counts})."
                + (f" {said}." if said else "")
                + (
                    f" {unexpected} not expected: see the run's log."
                    if expected and unexpected
                    else ""
                )
            )
    for fig in record.figures[1:]:
        md += ["", f"![{record.experiment}: {Path(fig).stem}]({fig})"]
    return md


def _counts_table(by_theory: dict[str, dict[str, int]]) -> list[str]:
    md = [
        _row(
            "theory",
            "experiments",
            "complete",
            "evidence",
            "holds",
            "findings (refuted)",
            "inconclusive",
            "not run",
            "without negative control",
            "consistency (failed)",
            "report",
            "unclassified",
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for theory, c in by_theory.items():
        md.append(
            _row(
                theory,
                str(c["experiments"]),
                str(c["complete"]),
                str(c["evidence"]),
                str(c["holds"]),
                str(c["findings"]),
                str(c["inconclusive"]),
                str(c["not_run"]),
                str(c["without_negative_control"]),
                f"{c['consistency']} ({c['consistency_failed']})",
                str(c["report"]),
                str(c["unclassified"]),
            )
        )
    return md


def write_report(run_dirs: list[Path], out: str | Path, title: str = "jaxdyn report") -> Path:
    """Write ``report.md`` and ``report.html`` (with copies of all figures) into ``out``."""
    out = Path(out)
    records = [_load(Path(d), out) for d in run_dirs]
    sections: dict[str, list[_RunRecord]] = {}
    for record in records:
        sections.setdefault(record.theory, []).append(record)
    by_theory = theory_counts([r.dir for r in records])
    docs = {title_: page for _, title_, page in THEORIES}

    md = [f"# {title}", "", f"{len(records)} run(s) in {len(sections)} theory section(s)."]
    md += ["", *_counts_table(by_theory), "", FINDINGS_EXPLAINED]
    md += [
        "",
        _row(
            "experiment",
            "theory",
            "status",
            "evidence",
            "findings",
            "consistency (failed)",
            "report",
            "failed members",
            "wall time (s)",
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        c = _counts(r.summary)
        md.append(
            _row(
                f"[{r.experiment}](#{r.anchor})",
                r.theory,
                str(r.summary.get("status")),
                str(c["evidence"]),
                str(c["findings"]),
                f"{c['consistency']} ({c['consistency_failed']})",
                str(c["report"]),
                str(r.summary.get("failed_members", 0)),
                _number(r.summary.get("wall_time_s", 0.0)),
            )
        )
    for theory, group in sections.items():
        md += ["", f"## {theory}", "", describe_theory_counts(by_theory[theory]) + "."]
        if theory in docs:
            md.append(f"The theory and its findings: `{docs[theory]}`.")
        for record in group:
            if record.figures:
                fig = record.figures[0]
                md += ["", f"![{record.experiment}: {Path(fig).stem}]({fig})"]
        md += _verdict_table(group)
        md += _consistency_table(group)
        md += _report_table(group)
        for record in group:
            md += _experiment_section(record)
    markdown = "\n".join(md) + "\n"
    atomic_write_text(out / "report.md", markdown)
    atomic_write_text(out / "report.html", _markdown_to_html(markdown, title))
    return out


# -- the Markdown subset the report uses, as HTML -------------------------------------------
def _inline(text: str) -> str:
    text = html.escape(text, quote=False)
    text = re.sub(r"`([^`]*)`", r"<code>\1</code>", text)
    text = re.sub(r"\*\*([^*]*)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"\[([^\]]*)\]\(([^)]*)\)", r'<a href="\2">\1</a>', text)
    return text


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def _markdown_to_html(markdown: str, title: str) -> str:
    """Headings, tables, images, paragraphs and anchors: the Markdown the report writes."""
    body: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            head, data = rows[0], rows[2:]
            body.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
            for r in data:
                body.append("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>")
            body.append("</table>")
            continue
        image = re.fullmatch(r"!\[([^\]]*)\]\(([^)]*)\)", line.strip())
        heading = re.match(r"(#{1,3}) (.*)", line)
        if image:
            src, alt = html.escape(image.group(2)), html.escape(image.group(1))
            body.append(
                f'<figure><img src="{src}" alt="{alt}"><figcaption>{alt}</figcaption></figure>'
            )
        elif heading:
            level = len(heading.group(1))
            body.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif line.startswith("<a id="):
            body.append(line)
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
        i += 1
    style = (
        "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;margin:0.5em 0;font-size:90%}"
        "td,th{border:1px solid #ccc;padding:3px 8px;vertical-align:top}"
        "img{max-width:100%}figure{margin:1em 0}"
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
