"""docs/benchmarks.md's table is generated from benchmarks/results/*.json and agrees with it."""

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _make_table():
    spec = importlib.util.spec_from_file_location(
        "make_table", ROOT / "benchmarks" / "make_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_holds_the_generated_table():
    make_table = _make_table()
    assert make_table.main(["--check"]) == 0, "run: python benchmarks/make_table.py"


def test_every_row_reads_its_json():
    """Read the page's table back (not through the generator) and look each ratio up in its file."""
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    body = page.split("benchmarks-table: start", 1)[1].split("benchmarks-table: end", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in body.splitlines()
        if line.startswith("|")
    ][2:]
    files = {row[-1].strip("`") for row in rows}
    assert files == {
        f.name
        for f in (ROOT / "benchmarks" / "results").glob("*.json")
        if f.name != "experiment_wall_times.json"  # its own table, below
    }
    checked = 0
    for bench, _, _, ratio, target, passed, device, file in rows:
        match = re.fullmatch(r"(\S+) \(`(\w+)`\)", ratio)
        if not match:
            continue
        record = json.loads((ROOT / "benchmarks" / "results" / file.strip("`")).read_text())
        if "vector_isa" in record:  # the kind of CPU, where a file states it
            assert device.endswith(f"({record['vector_isa'].upper()})"), (bench, device)
        if " / " in bench:
            record = record[bench.split(" / ", 1)[1]]
        value = record[match.group(2)]
        assert float(match.group(1)) == float(f"{value:.3g}"), (bench, ratio, value)
        if target and re.fullmatch(r"[0-9.e+-]+", target):
            assert passed == ("yes" if value >= float(target) else "no"), (
                bench,
                ratio,
                target,
                passed,
            )
        checked += 1
    assert checked >= len(files)


def test_a_stale_table_is_caught(tmp_path):
    """Negative control: a result that changes makes the page stale."""
    make_table = _make_table()
    results = tmp_path / "results"
    results.mkdir()
    record = json.loads((ROOT / "benchmarks" / "results" / "copy_head_sgld.json").read_text())
    (results / "copy_head_sgld.json").write_text(json.dumps(record))
    page = f"x\n{make_table.START}\n{make_table.END}\n"
    rendered = make_table.render(page, results)
    record["ratio"] = record["ratio"] / 2
    (results / "copy_head_sgld.json").write_text(json.dumps(record))
    assert make_table.render(rendered, results) != rendered


def test_the_experiment_table_reads_its_json():
    """The per-experiment table, read back from the page, equals the JSON row by row."""
    record = json.loads(
        (ROOT / "benchmarks" / "results" / "experiment_wall_times.json").read_text()
    )
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    body = page.split("experiments-table: start", 1)[1].split("experiments-table: end", 1)[0]
    rows = [line.strip("|").split("|") for line in body.splitlines() if line.startswith("| ")][1:]
    assert {r[0].strip() for r in rows} == set(record["quick"]) | set(record["full"])

    def number(text):  # an empty cell: not measured
        return float(text) if text else None

    for name, cold, warm, wall, *_ in ([c.strip() for c in r] for r in rows):
        quick, full = record["quick"].get(name, {}), record["full"].get(name, {})
        assert number(cold) == quick.get("cold_s"), name
        assert number(warm) == quick.get("warm_s"), name
        assert number(wall) == full.get("wall_s"), name
