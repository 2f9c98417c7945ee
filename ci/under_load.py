"""Run the test suite N times in a row while every core is kept busy.

    python ci/under_load.py                    # 3 runs, one burner per core
    python ci/under_load.py --runs 1 -- -k launch   # extra args go to pytest

A suite that passes only on a quiet machine fails in CI one run in N, and
then blocks every change behind it. The burners are plain busy loops in
their own processes at the suite's own priority, the load a shared CI runner
or a neighbour's build puts on the machine. Each run is what `make test`
does: `pytest -n 3 --dist loadgroup`, then the orphan check.

The burners end with this script however it ends: they are killed in a
`finally` (normal exit, Ctrl-C, SIGTERM), and each also watches its parent
and stops once it is gone (SIGKILL of this script runs no `finally`).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BURN = """
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:  # reparented: whoever started us is gone
    for _ in range(200_000):
        pass
"""


def start_burners(count: int) -> list[subprocess.Popen]:
    return [
        subprocess.Popen([sys.executable, "-c", BURN, str(os.getpid())], stdin=subprocess.DEVNULL,
                         start_new_session=True)  # a terminal's Ctrl-C is ours to handle, in order
        for _ in range(count)
    ]


def stop(burners: list[subprocess.Popen]) -> None:
    for p in burners:
        p.kill()
    for p in burners:
        p.wait()


def one_run(command: list[str], log: Path) -> tuple[int, str, float]:
    """Run the suite once, echoing its output; (exit code, pytest's summary line, seconds)."""
    start = time.monotonic()
    summary = ""
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
        for line in proc.stdout:
            sys.stdout.write(line)
            out.write(line)
            # the last such line is pytest's own (earlier ones come from failures' output)
            if re.match(r"=* ?\d+ (passed|failed|errors?|skipped|deselected|xfailed)\b.* in [\d.]+s", line):
                summary = line.strip(" =\n")
        code = proc.wait()
    if code == 0:
        orphans = subprocess.run([sys.executable, str(ROOT / "ci" / "no_orphans.py")], cwd=ROOT,
                                 capture_output=True, text=True)
        if orphans.returncode:
            code, summary = orphans.returncode, f"{summary}; {orphans.stderr.strip()}"
    return code, summary, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs in a row (default 3)")
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 1,
                        help="busy-loop processes (default: one per core)")
    parser.add_argument("--logs", type=Path, default=Path("under-load-logs"), help="one log per run here")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = parser.parse_args()
    if args.runs < 1 or args.burners < 0:
        parser.error("--runs must be at least 1 and --burners at least 0")
    command = [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "--no-loadscope-reorder", "-p",
               "no:cacheprovider", *args.pytest_args]
    args.logs.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally below runs

    results = []
    burners = start_burners(args.burners)
    try:
        print(f"[under-load] {args.burners} burner(s) on {os.cpu_count()} core(s); {' '.join(command)}", flush=True)
        for i in range(1, args.runs + 1):
            code, summary, seconds = one_run(command, args.logs / f"run{i}.log")
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            results.append((code, summary, seconds, load))
            print(f"[under-load] run {i}: {'PASS' if code == 0 else 'FAIL'} in {seconds:.0f} s "
                  f"(load average {load}): {summary}", flush=True)
    except KeyboardInterrupt:
        print("[under-load] interrupted", file=sys.stderr)
        return 130
    finally:
        stop(burners)

    print("\n[under-load] summary")
    for i, (code, summary, seconds, load) in enumerate(results, 1):
        print(f"  run {i}: {'PASS' if code == 0 else 'FAIL'}  {seconds:6.0f} s  load {load}  {summary}")
    return 0 if all(code == 0 for code, *_ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
