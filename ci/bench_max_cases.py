"""A case budget against the whole exploration: the same causes, at what cost.

    python ci/bench_max_cases.py [--script 'CMD'] [--max-cases N] [-- EXPLORE ARGS ...]

`--max-cases N` (`pipeline.budget`) runs N cases of an exploration, chosen
to see every rank, phase, operation and fault kind before any twice. The
claim (issue 48, item 5) is that a CI job that runs those N finds the
causes the whole exploration finds. This runs `ckpt-harness explore` on a
script (default: the tiny HF Trainer, `tests/scripts/hf_train.py`, at two
workers) twice, whole and within the budget, each a fresh process, and
prints:

- the wall time and the number of cases of each, and the ratio;
- every finding of the whole exploration (`oracle.findings`), and whether
  the budgeted one has a finding of the same cause: the same kind, property
  and verdict, opened by the same operations on the same files (a window:
  where its fix goes; where it closes is the last failing case a budget
  ran, so that edge is printed, not compared), or the same headline with
  its numbers out (any other kind);
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


def cause(finding: dict) -> tuple:
    """What a finding says is wrong, not how many cases showed it."""
    def ops(sites: list[dict]) -> frozenset:
        return frozenset((s["op"], s["target"]) for s in sites)

    said = (finding["kind"], finding["check"], finding["verdict"])
    if finding["opened_by"]:
        return (*said, ops(finding["opened_by"]))
    return (*said, re.sub(r"\d+", "N", finding["headline"].split(":")[0]))


def edges(finding: dict) -> str:
    def named(sites: list[dict]) -> str:
        return ", ".join(sorted({f"{s['op']} {s['target']} (rank {s['rank']})" for s in sites})) or "-"

    return f"opened by {named(finding['opened_by'])}; closed by {named(finding['closed_by'])}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", default=HF, help=f"the script, as `explore --script` takes it (default: {HF})")
    parser.add_argument("--nproc-per-node", default="2")
    parser.add_argument("--max-cases", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="keep the two JSON reports in this directory")
    parser.add_argument("rest", nargs="*", help="more `explore` arguments (after --)")
    args = parser.parse_args()
    common = ["--script", args.script, "--nproc-per-node", args.nproc_per_node, *args.rest]
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-max-cases-") as tmp:
        if args.keep is not None:
            tmp = str(args.keep.resolve())
        sides = {}
        for name, more in (("whole", []), (f"--max-cases {args.max_cases}", ["--max-cases", str(args.max_cases)])):
            at = os.getloadavg()[0]
            wall, report = explore(common + more, Path(tmp, f"{len(sides)}.json"))
            sides[name] = (wall, report)
            cases = len({r["case"] for r in report["cases"]})
            print(f"{name}: {wall:.1f} s (load {at:.1f}), {cases} cases, verdict {report['verdict']}, "
                  f"{len(report['findings'])} findings", flush=True)
        (whole_wall, whole), (part_wall, part) = sides.values()
        print(f"whole / budgeted = {whole_wall / part_wall:.2f}x")
        found = {cause(f) for f in part["findings"]}
        for f in whole["findings"]:
            print(f"  {'found' if cause(f) in found else 'MISSED'}: {f['kind']}, {f['check']} "
                  f"{f['verdict'].upper()}, {len(f['cases'])} cases: {f['headline'][:200]}\n    {edges(f)}")
            for g in part["findings"]:
                if cause(g) == cause(f):
                    print(f"    within the budget, {len(g['cases'])} cases: {edges(g)}")
        extra = [f for f in part["findings"] if cause(f) not in {cause(g) for g in whole["findings"]}]
        for f in extra:
            print(f"  only within the budget: {f['check']} {f['verdict'].upper()}: {f['headline'][:200]}\n"
                  f"    {edges(f)}")
        missed = sum(cause(f) not in found for f in whole["findings"])
        print(f"{len(whole['findings']) - missed} of {len(whole['findings'])} causes found within the budget, "
              f"{len(extra)} not in the whole exploration")


if __name__ == "__main__":
    main()
