"""A case budget against the whole exploration: the same causes, at what cost.

    python ci/bench_max_cases.py [--script 'CMD'] [--max-cases N] [--keep DIR] [-- EXPLORE ARGS ...]
    python ci/bench_max_cases.py --reports WHOLE.json BUDGETED.json

`--max-cases N` (`pipeline.budget`) runs N cases of an exploration, chosen
to see every rank, phase, operation and fault kind before any twice. The
claim (issue 48, item 5) is that a CI job that runs those N finds the
causes the whole exploration finds. This runs `ckpt-harness explore` on a
script (default: the tiny HF Trainer, `tests/scripts/hf_train.py`, at two
workers) twice, whole and within the budget, each a fresh process, and
prints:

- the wall time and the number of cases of each, and the ratio;
- every finding of the whole exploration (`oracle.findings`), and whether
  the budgeted one has a finding of the same cause (`same_cause`);
- any finding of the budgeted run that the whole one lacks (none is the claim).

Run it from outside the checkout's root; its output is what
`docs/speed.md` quotes. No assertion here: the comparison is printed for a
person to read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HF = f"{ROOT / 'tests' / 'scripts' / 'hf_train.py'} {{ckpt_dir}}"


def explore(args: list[str], out: Path) -> tuple[float, dict]:
    cli = "import sys; from ckpt_harness.cli import main; sys.exit(main())"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", cli, "explore", *args, "--json", str(out), "--quiet"],
                          capture_output=True, text=True, cwd=out.parent,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    wall = time.monotonic() - started
    if not out.exists():
        sys.exit(f"explore {args} made no report ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, json.loads(out.read_text())


def same_cause(budgeted: dict, whole: dict) -> bool:
    """Does a finding of the budgeted run say what a finding of the whole one
    says? The same kind, property and verdict; for a window, every operation
    that opened it within the budget opens it in the whole exploration too
    (on the same rank: where its fix goes; a budget may run cases of one
    rank's part of a window alone, and its closing edge is the last failing
    case it ran, so that is printed, not compared); any other kind, the same
    headline with its numbers out."""
    def sites(finding: dict) -> set:
        return {(s["op"], s["target"], s["rank"]) for s in finding["opened_by"]}

    if (budgeted["kind"], budgeted["check"], budgeted["verdict"]) != (whole["kind"], whole["check"], whole["verdict"]):
        return False
    if budgeted["opened_by"] or whole["opened_by"]:
        return bool(sites(budgeted)) and sites(budgeted) <= sites(whole)
    def said(f: dict) -> str:
        return re.sub(r"\d+", "N", f["headline"].split(":")[0])

    return said(budgeted) == said(whole)


def edges(finding: dict) -> str:
    def named(sites: list[dict]) -> str:
        return ", ".join(sorted({f"{s['op']} {s['target']} (rank {s['rank']})" for s in sites})) or "-"

    return f"opened by {named(finding['opened_by'])}; closed by {named(finding['closed_by'])}"


def compare(whole: dict, part: dict) -> None:
    for f in whole["findings"]:
        mine = [g for g in part["findings"] if same_cause(g, f)]
        print(f"  {'found' if mine else 'MISSED'}: {f['kind']}, {f['check']} {f['verdict'].upper()}, "
              f"{len(f['cases'])} cases: {f['headline'][:200]}\n    {edges(f)}")
        for g in mine:
            print(f"    within the budget, {len(g['cases'])} cases: {edges(g)}")
    extra = [g for g in part["findings"] if not any(same_cause(g, f) for f in whole["findings"])]
    for g in extra:
        print(f"  only within the budget: {g['check']} {g['verdict'].upper()}: {g['headline'][:200]}\n    {edges(g)}")
    missed = sum(not any(same_cause(g, f) for g in part["findings"]) for f in whole["findings"])
    print(f"{len(whole['findings']) - missed} of {len(whole['findings'])} causes found within the budget, "
          f"{len(extra)} not in the whole exploration")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", default=HF, help=f"the script, as `explore --script` takes it (default: {HF})")
    parser.add_argument("--nproc-per-node", default="2")
    parser.add_argument("--max-cases", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="keep the two JSON reports in this directory (0.json: whole)")
    parser.add_argument("--reports", type=Path, nargs=2, metavar=("WHOLE", "BUDGETED"),
                        help="compare two reports made before instead of running")
    parser.add_argument("rest", nargs="*", help="more `explore` arguments (after --)")
    args = parser.parse_args()
    if args.reports:
        whole, part = (json.loads(p.read_text()) for p in args.reports)
        return compare(whole, part)
    common = ["--script", args.script, "--nproc-per-node", args.nproc_per_node, *args.rest]
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-max-cases-") as tmp:
        where = args.keep.resolve() if args.keep is not None else Path(tmp)
        sides = []
        for name, more in (("whole", []), (f"--max-cases {args.max_cases}", ["--max-cases", str(args.max_cases)])):
            at = os.getloadavg()[0]
            wall, report = explore(common + more, where / f"{len(sides)}.json")
            sides.append((wall, report))
            cases = len({r["case"] for r in report["cases"]})
            print(f"{name}: {wall:.1f} s (load {at:.1f}), {cases} cases, verdict {report['verdict']}, "
                  f"{len(report['findings'])} findings", flush=True)
        (whole_wall, whole), (part_wall, part) = sides
        print(f"whole / budgeted = {whole_wall / part_wall:.2f}x")
        compare(whole, part)


if __name__ == "__main__":
    main()
