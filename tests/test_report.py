"""The report: one section per theory, verdict tables with findings first, formatted cells,
every figure in the HTML, counts per theory on the command line."""

import html.parser
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from jaxdyn import fit_power_law
from jaxdyn.cli import main
from jaxdyn.evidence import ErrorModel, estimate, ordered
from jaxdyn.runs import Run, write_report
from jaxdyn.runs._report import theory_counts, theory_of


def _slope_evidence(n, y):
    fit = fit_power_law(n, y)
    return estimate(
        "error decays like n^-1/2",
        prediction=-0.5,
        value=fit.slope,
        standard_error=fit.slope_stderr,
        dof=len(n) - 2,
        alternative=0.0,
    )


def _theory_run(path: Path, experiment: str, slope: float, seed: int) -> None:
    """A run whose evidence comes from real fits: noisy power laws of a chosen slope."""
    rng = np.random.default_rng(seed)
    n = np.geomspace(10, 1e4, 12)
    y = n**slope * np.exp(0.02 * rng.standard_normal(n.size))
    run = Run(path, experiment=experiment, echo=False)
    run.evidence("decay_rate", _slope_evidence(n, y))
    stage_times = np.array([0.5, 1.25, 2.0])
    run.evidence(
        "stages_in_order",
        ordered(
            "stage times increase",
            measured=stage_times,
            error_model=ErrorModel.solver_tolerance(1e-6),
        ),
    )
    closed = 1.0 / 3.0
    run.consistency("closed_form", expected=closed, measured=closed + 1e-13, tolerance=1e-12)
    run.report("largest_n", measured=int(n[-1]), claim="largest particle count")
    run.scalar("fit", {"slope": float(np.polyfit(np.log(n), np.log(y), 1)[0]), "n": 12})
    run.scalar("trajectory", np.zeros((3, 4)))
    for name in ("headline", "detail"):
        fig, ax = plt.subplots()
        ax.loglog(n, y)
        run.save_figure(fig, name)
    run.finish()


class _Images(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


def test_report_has_a_section_per_theory_with_findings_first(tmp_path, capsys):
    runs = tmp_path / "runs"
    _theory_run(runs / "pde-decay", "pde-decay", slope=-0.5, seed=0)  # the claim holds
    _theory_run(runs / "pde-flat", "pde-flat", slope=0.0, seed=1)  # a finding: slope 0
    _theory_run(runs / "focus-dilution-x", "focus-dilution-x", slope=-0.5, seed=2)
    dirs = sorted(runs.iterdir())
    counts = theory_counts(dirs)
    pde = counts["The Transformer PDE"]
    assert pde["experiments"] == 2 and pde["complete"] == 2
    assert pde["evidence"] == 4 and pde["findings"] == 1 and pde["holds"] == 3
    assert pde["consistency"] == 2 and pde["consistency_failed"] == 0 and pde["report"] == 2
    assert counts["Focus and dilution"]["holds"] == 2

    assert main(["report", str(runs), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    assert "The Transformer PDE: 2/2 complete; evidence 4 (3 holds, 1 refuted" in printed
    assert "Focus and dilution: 1/1 complete; evidence 2 (2 holds" in printed

    md = (tmp_path / "report" / "report.md").read_text()
    section = md[md.index("## The Transformer PDE") :]
    verdicts = section[section.index("### Verdicts") : section.index("### Consistency")]
    rows = [line for line in verdicts.splitlines() if line.startswith("| [")]
    assert len(rows) == 4
    assert "refuted (finding)" in rows[0] and "pde-flat" in rows[0]  # the finding comes first
    assert all("holds" in r for r in rows[1:])
    # the measurement carries its error: the slope's 99% Student-t interval with 10 dof
    assert re.search(r"± [0-9.e-]+ \(99% interval, SE [0-9.e-]+, 10 dof\)", rows[0])
    assert "(alternative 0)" in rows[0]
    # no raw nested data in any table: dicts are spread, arrays described
    for line in md.splitlines():
        if line.startswith("|"):
            assert "{" not in line and "'" not in line, line
    assert "| fit.slope |" in md and "array 3 x 4" in md

    page = (tmp_path / "report" / "report.html").read_text()
    images = _Images()
    images.feed(page)
    assert len(images.sources) == 6  # two figures of each of the three runs, each once
    assert len(set(images.sources)) == 6
    for src in images.sources:
        assert (tmp_path / "report" / src).is_file(), src
    assert page.count("<h2>") == 2 and "<h3>Verdicts</h3>" in page


def test_theory_of_groups_by_name_then_by_package():
    assert theory_of("copy-head-sgld-linear") == "Copy-head emergence"
    assert theory_of("pde-twisted") == "The Transformer PDE"
    assert theory_of("my-exp", "my_package.experiments.mine") == "my_package.experiments"
    assert theory_of("my-exp", "_jaxdyn_import_x_123") == "other experiments"


def test_report_of_a_real_toy_run(tmp_path, monkeypatch):
    """A run of the toy experiment (blow-up of dy/dt = r y^2, closed form known) through the
    command line: its evidence and consistency checks appear with their numbers."""
    monkeypatch.setenv("JAXDYN_IMPORT", "toy_experiment")
    monkeypatch.setenv("JAXDYN_CACHE_DIR", "off")
    out = tmp_path / "runs" / "toy"
    assert main(["run", "toy-blowup", "--quick", "--out", str(out), "--processes", "1"]) == 0
    write_report([out], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## tests" in md or "## other experiments" in md or "## toy_experiment" in md
    row = next(line for line in md.splitlines() if "`blowup_members`" in line)
    assert "holds" in row and "exact" in row
    assert "`closed_form`" in md and "`event_time`" in md


def test_not_run_is_counted_apart_with_its_why_and_command(tmp_path):
    """A check not run at this size is `not_run`, not `inconclusive`: its why names the config
    values of this run and its command sets what it needs; the report and the CLI line count it."""
    import dataclasses
    import json

    from jaxdyn._cli._commands import describe_counts

    @dataclasses.dataclass(frozen=True)
    class Config:
        proxy: bool = False
        seeds: int = 4

    path = tmp_path / "focus-dilution-text"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"quick": True}))
    run = Run(path, experiment="focus-dilution-text", echo=False, config=Config(seeds=3))
    run.evidence(
        "decay_rate", _slope_evidence(np.geomspace(10, 1e4, 12), np.geomspace(10, 1e4, 12) ** -0.5)
    )
    run.not_run(
        "bigram_proxy",
        "the bigram proxy predicts the flow",
        needs={"proxy": True, "seeds": 16},
        why="its descents are the run's most costly part",
    )
    run.finish()
    summary = json.loads((path / "summary.json").read_text())
    counts = summary["counts"]
    assert (counts["not_run"], counts["inconclusive"], counts["evidence"]) == (1, 0, 2)
    check = next(c for c in summary["checks"] if c["name"] == "bigram_proxy")
    assert check["verdict"] == "not_run"
    assert "proxy=False" in check["why"] and "seeds=3" in check["why"] and "--quick" in check["why"]
    assert check["command"].startswith(
        "jaxdyn run focus-dilution-text --quick --set proxy=true --set seeds=16"
    )
    assert "1 not run" in describe_counts(summary)
    report = write_report([path], tmp_path / "report")
    md = (report / "report.md").read_text()
    assert "not run" in md and check["command"] in md
    assert md.index("A **finding** is") < md.index("### Verdicts")
    # A full-size run without `needs` says it needs the full size and drops --quick.
    other = tmp_path / "full"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"quick": False}))
    run = Run(other, experiment="x", echo=False, config=Config())
    run.not_run("big", "a claim", why="decided at full size only")
    assert "--quick" not in json.loads((other / "summary.json").read_text())["checks"][0]["command"]


def test_the_report_says_which_failures_were_expected_and_why(tmp_path):
    import jax.numpy as jnp

    from jaxdyn import Status
    from jaxdyn.sweep import Grid

    def member(params, key):
        return {
            "y": jnp.asarray(1.0),
            "status": Status.where(params["b"] > 1, Status.max_steps_reached, Status.successful),
        }

    run = Run(tmp_path / "r", experiment="pde-x", echo=False)
    run.sweep(
        "s",
        member,
        Grid.product({"b": np.array([0.0, 2.0])}, seeds=1),
        expected=[(Status.max_steps_reached, "b > 1 stalls by design")],
    )
    run.finish()
    md = (write_report([tmp_path / "r"], tmp_path / "rep") / "report.md").read_text()
    assert "1 max_steps_reached: expected, b > 1 stalls by design." in md
