"""Where the test suite's CPU goes, test by test (Linux, as root).

    python ci/suite_cpu.py                       # the whole suite, as `make test` runs it
    python ci/suite_cpu.py -- tests/test_cli.py  # extra args go to pytest

The suite is CPU-bound on two cores: `--durations` gives each test's wall
time, but three xdist workers share the cores, and a test's processes
(ranks, torchrun agents and workers, pytester and CLI subprocesses,
Chromium) are not the test process. BSD process accounting (`acct(2)`)
writes a record of every process that exits, with its own user and system
time; each is charged to the test its xdist worker ran when it exited,
found through the records' parent pids. A fork server outlives the tests
that used it; its own time (torch's import, once per worker) lands on the
test that was running when it exited, and is shown on its own line.

Prints the tests by CPU seconds (every test's in by_test.json beside the
records), then per module, then the total against the machine's CPU over
the same run (/proc/stat): what accounting missed (processes still running
at the end, the kernel's own work) is the gap.
"""

from __future__ import annotations

import bisect
import collections
import ctypes
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid,
#: pid, ppid, btime, etime (float), utime, stime, mem, io, rw, minflt,
#: majflt, swaps (comp_t each), comm[16].
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")
AHZ = 100
#: A process of this many CPU seconds or more is a fresh interpreter that imported torch (2-4 s on the
#: 2-core box); a rank forked from a warm server takes 0.05-0.2 s.
HEAVY = 2.0


def _comp(value: int) -> int:
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def read_acct(path: Path) -> list[dict]:
    data = path.read_bytes()
    out = []
    for off in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        (_, version, _, _, _, _, pid, ppid, btime, etime, utime, stime, *_rest, comm) = ACCT_V3.unpack_from(data, off)
        if version != 3:
            raise SystemExit(f"{path}: acct record version {version}, expected 3")
        out.append({"pid": pid, "ppid": ppid, "end": btime + etime / AHZ,
                    "cpu": (_comp(utime) + _comp(stime)) / AHZ, "comm": comm.rstrip(b"\0").decode(errors="replace")})
    return out


# -- the pytest side: when each test ran on which worker ---------------------

LOG = "CKPT_SUITE_CPU_LOG"


def pytest_runtest_logstart(nodeid, location):
    _log({"test": nodeid, "start": time.time()})


def pytest_runtest_logfinish(nodeid, location):
    _log({"test": nodeid, "end": time.time()})


def _log(entry: dict) -> None:
    path = os.environ.get(LOG)
    if path:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        entry["worker"], entry["self"] = os.getpid(), usage.ru_utime + usage.ru_stime
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


# -- the driver ----------------------------------------------------------------

def _machine_cpu() -> float:
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    work = Path(tempfile.mkdtemp(prefix="suite-cpu-"))
    acct, log = work / "pacct", work / "tests.jsonl"
    acct.touch()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(str(acct).encode()) != 0:
        raise SystemExit(f"acct(2) failed: {os.strerror(ctypes.get_errno())} (run as root on Linux)")
    env = {**os.environ, LOG: str(log), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "--no-loadscope-reorder",
           "-p", "no:cacheprovider", "-p", "ci.suite_cpu", "-q", *extra]
    before, start = _machine_cpu(), time.monotonic()
    try:
        code = subprocess.call(cmd, cwd=ROOT, env=env)
    finally:
        libc.acct(None)
    machine, wall = _machine_cpu() - before, time.monotonic() - start
    by_test = report(read_acct(acct), [json.loads(line) for line in log.read_text().splitlines()], machine, wall)
    (work / "by_test.json").write_text(json.dumps(by_test.most_common(), indent=0))
    print(f"every test's CPU seconds: {work / 'by_test.json'}")
    return code


def report(records: list[dict], log: list[dict], machine: float, wall: float) -> collections.Counter:
    parent = {r["pid"]: r["ppid"] for r in records}
    workers = {e["worker"] for e in log}
    spans = collections.defaultdict(list)  # worker -> [(start, end, test)]
    starts = {}
    by_test = collections.Counter()  # the test's own work in its worker, then its processes'
    in_tests = collections.Counter()  # worker -> its CPU inside tests
    heavy = collections.Counter()  # test -> its processes of HEAVY CPU s or more (fresh interpreters importing torch)
    for e in log:
        if "start" in e:
            starts[e["worker"], e["test"]] = e
        else:
            began = starts.pop((e["worker"], e["test"]))
            spans[e["worker"]].append((began["start"], e["end"], e["test"]))
            by_test[e["test"]] += e["self"] - began["self"]
            in_tests[e["worker"]] += e["self"] - began["self"]
    for s in spans.values():
        s.sort()

    def worker_of(pid: int) -> int | None:
        for _ in range(64):
            if pid in workers:
                return pid
            if pid not in parent:
                return None
            pid = parent[pid]
        return None

    # A process whose parent exited first was reparented to init: it is charged
    # to the worker of the nearest lower pid that has one (its kin, started just before).
    known = sorted((r["pid"], w) for r in records if (w := worker_of(r["pid"])) is not None)
    guessed = 0.0
    for r in records:
        w = worker_of(r["pid"])
        if w is None:
            i = bisect.bisect_left(known, (r["pid"], 0)) - 1
            if i < 0 or r["ppid"] != 1:
                by_test["(outside the xdist workers' trees)"] += r["cpu"]
                continue
            w = known[i][1]
            guessed += r["cpu"]
        if r["pid"] == w:
            by_test["(the xdist workers outside their tests: start-up, collection)"] += r["cpu"] - in_tests[w]
            continue
        s = spans[w]
        i = bisect.bisect_right(s, (r["end"], float("inf"), "")) - 1
        test = s[i][2] if i >= 0 else "(before the worker's first test)"
        by_test[test] += r["cpu"]
        heavy[test] += r["cpu"] >= HEAVY
    total = sum(r["cpu"] for r in records)
    print(f"\n{'cpu s':>8}  test (its own work in the xdist worker, and the processes that exited while it ran)")
    for name, cpu in by_test.most_common(40):
        print(f"{cpu:8.1f}  {name}  ({heavy[name]} heavy)")
    by_module, heavy_in = collections.Counter(), collections.Counter()
    for name, cpu in by_test.items():
        by_module[name.split("::")[0]] += cpu
        heavy_in[name.split("::")[0]] += heavy[name]
    print(f"\n{'cpu s':>8}  module")
    for name, cpu in by_module.most_common():
        print(f"{cpu:8.1f}  {name}  ({heavy_in[name]} heavy)")
    by_comm = collections.Counter()
    for r in records:
        by_comm[r["comm"]] += r["cpu"]
    print("\nby command name: " + ", ".join(f"{c} {v:.0f}" for c, v in by_comm.most_common(8)))
    print(f"\naccounted {total:.0f} CPU s ({guessed:.0f} of reparented processes charged by pid), "
          f"machine {machine:.0f} CPU s, wall {wall:.0f} s, {len(records)} processes")
    return by_test


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
