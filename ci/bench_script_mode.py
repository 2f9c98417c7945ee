"""What script mode costs next to Job mode, measured in the same run.

    python ci/bench_script_mode.py [--repeat N] [--no-verify]

Single runs: the same training (DDP over gloo, 2 ranks, 8 steps, a
`torch.save` of model and optimizer every 2 steps) once as the built-in
`torch_save` Job on the warm fork server (`JobTarget.run`, what `verify` does
per run) and once as an unmodified script under torchrun (`run_elastic`: an
agent and two workers, fresh interpreters importing torch, no plan: the
launch alone). Runs alternate, so load slows both alike; the ratio of the
medians is the figure to report.

Whole verifies (the figure users meet): `verify` of that Job next to
`verify_script` of tests/scripts/resumable.py (the same shape of training:
DDP, SGD with momentum, rank 0 `torch.save`s model, optimizer and step every
2 of 8 steps), each judged by the oracle with every resume case; the second
pays for its probes, records and bootstrap like the first. Their ratio is
printed last.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ckpt_harness.config import RunConfig  # noqa: E402
from ckpt_harness.jobref import resolve  # noqa: E402
from ckpt_harness.launch import prestart  # noqa: E402
from ckpt_harness.launch.elastic import ScriptSpec, run_elastic  # noqa: E402
from ckpt_harness.launch.worker import WorkerRecord  # noqa: E402
from ckpt_harness.targets import RunRequest, of  # noqa: E402

SCRIPT = ROOT / "tests" / "scripts" / "ddp_train.py"
RESUMABLE = ROOT / "tests" / "scripts" / "resumable.py"
STEPS, SAVE_EVERY, WORLD = 8, 2, 2


def whole_verifies(tmp: Path) -> tuple[float, float]:
    """Seconds of a whole Job verify and of a whole script verify, every case, both passing."""
    from ckpt_harness.pipeline.verify import verify, verify_script

    start = time.perf_counter()
    job = verify("torch_save", workdir=tmp / "verify-job", world_size=WORLD, steps=STEPS, save_every=SAVE_EVERY)
    job_seconds = time.perf_counter() - start
    assert job.ok, job.explain()
    start = time.perf_counter()
    script = verify_script(f"{RESUMABLE} {{ckpt_dir}} --steps {STEPS} --save-every {SAVE_EVERY}",
                           workdir=tmp / "verify-script", nproc_per_node=WORLD)
    script_seconds = time.perf_counter() - start
    assert script.ok, script.explain()
    print(f"whole verify, job on the fork server: {job_seconds:.1f} s ({len(job.results)} checks)")
    print(f"whole verify, script under torchrun:  {script_seconds:.1f} s ({len(script.results)} checks)")
    return job_seconds, script_seconds


def job_run(tmp: Path, i: int) -> float:
    ref, _ = resolve("torch_save")
    config = RunConfig.build(ref, world_size=WORLD, steps=STEPS, save_every=SAVE_EVERY)
    start = time.perf_counter()
    run = of(config).run(RunRequest(f"job{i}"), tmp / f"job{i}" / "ckpt", tmp / f"job{i}" / "run")
    elapsed = time.perf_counter() - start
    assert run.outcome.ok, run.outcome
    return elapsed


def script_run(tmp: Path, i: int) -> tuple[float, tuple[float, float, float]]:
    """Seconds in all, and where they went: until the workers' bootstrap ran
    (agent and worker interpreters, rendezvous), the script (its imports
    too), and after it (the workers' exit, teardown)."""
    out = tmp / f"script{i}"
    out.mkdir()
    start = time.monotonic()
    outcome = run_elastic(ScriptSpec(command=(str(SCRIPT), str(out), str(STEPS), str(SAVE_EVERY)),
                                     run_dir=out, deadline=300, nproc_per_node=WORLD))
    end = time.monotonic()
    assert outcome.ok, outcome
    records = WorkerRecord.read_all(out)
    booted, done = max(r.started for r in records), max(r.finished for r in records)
    return end - start, (booted - start, done - booted, end - done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-verify", dest="verify", action="store_false", help="single runs only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-script-") as d:
        tmp = Path(d)
        start = time.perf_counter()
        prestart(wait=True)
        print(f"fork server start (once per harness process): {time.perf_counter() - start:.2f} s")
        jobs, scripts, phases = [], [], []
        for i in range(args.repeat):
            jobs.append(job_run(tmp, i))
            elapsed, parts = script_run(tmp, i)
            scripts.append(elapsed)
            phases.append(parts)
            print(f"  round {i}: job {jobs[-1]:.2f} s, script {elapsed:.2f} s "
                  f"(start {parts[0]:.2f} + script {parts[1]:.2f} + end {parts[2]:.2f})", flush=True)
        job, script = statistics.median(jobs), statistics.median(scripts)
        start, body, end = (statistics.median(p) for p in zip(*phases))
        print(f"job on the warm fork server: median {job:.2f} s (n={len(jobs)})")
        print(f"script under torchrun:       median {script:.2f} s (n={len(scripts)}): until the bootstrap "
              f"{start:.2f} s, the script {body:.2f} s, after it {end:.2f} s")
        print(f"script mode / job mode (one run): {script / job:.1f}x")
        if args.verify:
            job_verify, script_verify = whole_verifies(tmp)
            print(f"script mode / job mode (whole verify): {script_verify / job_verify:.1f}x")


if __name__ == "__main__":
    main()
