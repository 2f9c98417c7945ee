"""Bisect: the first release of a package whose verdict changed, by cause.

"Which release broke my resume?" is a search over an ordered list of
releases, from one the user calls good to one they call bad. Each release
probed is a verification of the same target with that release pinned
(`--pins NAME==VERSION`, over the target's other pins), in an environment
`launch.envs` makes once and keeps, so a second bisection over the same
range makes none. A probe is judged against the good release's own
verification, by cause (`oracle.causes`, as a baseline judges a CI run):
it changed if its failing judgments' (case, cause) are not the good
release's: a new failure, the same failing case for another cause, or a
failure of the good release that it no longer has (a fix: "which release
fixed it" is the same search, and a range whose bad end passes where the
good end failed has changed).

Both ends are run first: the good one gives the reference, and the bad one
must have changed, else the range holds no change and the bisection says
so. Then the releases between them are probed by halves, log2 of their
number: the first changed release is the one to blame, with a repro line of
its failing case under it. A probe that could not be judged (a harness
error, an undecided case) stops the bisection there, saying so: blaming a
release for the harness's own trouble would be a false alarm.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ckpt_harness.config import pins as requirements
from ckpt_harness.errors import UsageError
from ckpt_harness.launch.envs import EnvError
from ckpt_harness.oracle.causes import cause_of
from ckpt_harness.report import Report
from ckpt_harness.targets import Target
from ckpt_harness.verdict import Verdict

#: A verification of `target` in a work directory of its own: what a probe runs.
Verify = Callable[[Target, Path], Report]


@dataclasses.dataclass(frozen=True)
class Probe:
    """One release's verification, as the bisection read it."""

    release: str
    verdict: Verdict
    #: (case, cause) of every judgment that did not pass.
    causes: frozenset[tuple[str, str]]
    #: The repro line of its first failing case, under this release.
    repro: Optional[str]
    seconds: float
    #: Some judgment could not be made (ERROR, UNKNOWN): the probe says nothing of the release.
    undecided: bool


@dataclasses.dataclass(frozen=True)
class Bisection:
    package: str
    #: The range, good first, bad last, in release order.
    releases: tuple[str, ...]
    #: In the order they ran: good, bad, then the halves.
    probes: tuple[Probe, ...]
    #: The first release whose causes are not the good one's; None when none changed or a probe was undecided.
    culprit: Optional[str]
    #: Why the bisection stopped early (an undecided probe), else None.
    stopped: Optional[str] = None

    @property
    def reference(self) -> Probe:
        return self.probes[0]

    def new(self, probe: Probe) -> list[tuple[str, str]]:
        """What `probe` fails for that the good release did not."""
        return sorted(probe.causes - self.reference.causes)

    def fixed(self, probe: Probe) -> list[tuple[str, str]]:
        """What the good release fails for that `probe` does not."""
        return sorted(self.reference.causes - probe.causes)

    def _said(self, probe: Probe) -> str:
        new, fixed = self.new(probe), self.fixed(probe)
        if not new and not fixed:
            return f"same as {self.releases[0]}"
        return "changed: " + "; ".join([*(f"new {case}: {cause}" for case, cause in new),
                                        *(f"fixed {case}: {cause}" for case, cause in fixed)])

    def explain(self) -> str:
        head = (f"ckpt-harness bisect: {self.package}, {len(self.releases)} releases from {self.releases[0]} (good) "
                f"to {self.releases[-1]} (bad)")
        lines = [head]
        for i, probe in enumerate(self.probes):
            role = ("good: the reference" + ("" if not probe.causes else ", failing for " + "; ".join(
                f"{case}: {cause}" for case, cause in sorted(probe.causes)))) if i == 0 else (
                "undecided: a judgment could not be made" if probe.undecided else self._said(probe))
            lines.append(f"  {probe.release:<12} {probe.verdict.value.upper():<8} {role}  ({probe.seconds:.1f} s)")
        between = len(self.probes) - 2
        runs = f"{between} probe{'s' * (between != 1)} between the ends, {len(self.probes)} releases run"
        seconds = sum(p.seconds for p in self.probes)
        if self.stopped:
            lines.append(f"stopped: {self.stopped} ({runs}, {seconds:.0f} s)")
        elif self.culprit is None:
            causes = "passes, as it does" if not self.reference.causes else "fails for the causes it fails for"
            lines.append(f"no change: {self.releases[-1]} {causes} at {self.releases[0]}; the releases between were "
                         f"not run ({runs}, {seconds:.0f} s)")
        else:
            blamed = next(p for p in self.probes if p.release == self.culprit)
            lines.append(f"first changed release: {self.package} {self.culprit} ({runs}, {seconds:.0f} s)")
            lines += [f"  new: {case}: {cause}" for case, cause in self.new(blamed)]
            lines += [f"  fixed: {case}: {cause}" for case, cause in self.fixed(blamed)]
            repro = blamed.repro or self.reference.repro
            if repro:
                lines.append(f"repro: {repro}" + ("" if blamed.repro else f" (fails at {self.releases[0]}, "
                                                                           f"passes at {self.culprit})"))
        return "\n".join(lines)


def bisect(target: Target, package: str, releases: Sequence[str], root: Path, verify: Verify,
           say: Callable[[str], None] = lambda line: None) -> Bisection:
    """Bisect `releases` (good first, bad last) of `package` on `target`."""
    if len(releases) < 2:
        raise UsageError("bisect needs a good and a bad release, the good one first")
    probes: dict[str, Probe] = {}

    def probe(release: str) -> Probe:
        say(f"bisect: {package} {release}")
        started = time.monotonic()
        report = verify(pinned(target, package, release), root / release)
        causes = frozenset((r.case, str(cause_of(j))) for r in report.results for j in r.judgments()
                           if not j.verdict.ok)
        failing = next((r for r in report.results if not r.verdict.ok), None)
        undecided = any(j.verdict in (Verdict.ERROR, Verdict.UNKNOWN) for r in report.results for j in r.judgments())
        probes[release] = found = Probe(release, report.verdict, causes, failing.repro if failing else None,
                                        time.monotonic() - started, undecided)
        return found

    def done(culprit: Optional[str], stopped: Optional[str] = None) -> Bisection:
        return Bisection(package, tuple(releases), tuple(probes.values()), culprit, stopped)

    good = probe(releases[0])
    if good.undecided:
        return done(None, f"the good release {good.release} could not be judged, so nothing can be compared with it")

    def changed(p: Probe) -> bool:
        return p.causes != good.causes

    bad = probe(releases[-1])
    if bad.undecided:
        return done(None, f"the bad release {bad.release} could not be judged")
    if not changed(bad):
        return done(None)
    lo, hi = 0, len(releases) - 1  # releases[lo] has not changed, releases[hi] has
    while hi - lo > 1:
        mid = (lo + hi) // 2
        found = probe(releases[mid])
        if found.undecided:
            return done(None, f"{package} {found.release} could not be judged: bisect the range on either side of "
                              "it, or look at its report")
        lo, hi = (lo, mid) if changed(found) else (mid, hi)
    return done(releases[hi])


def bisect_script(script: str, package: str, good: str, bad: str, *, releases: Optional[Sequence[str]] = None,
                  cases: Optional[Sequence[str]] = None, workdir: Optional[Path] = None, **settings) -> Bisection:
    """`ckpt-harness bisect --script` from Python (and the plugin's fixture):
    `settings` are those of `ScriptConfig`, `cases` limit each probe's
    verification, `releases` default to those pip finds."""
    from ckpt_harness import targets
    from ckpt_harness.pipeline.verify import run_verification
    from ckpt_harness.pipeline.workdir import prepare_workdir

    target = targets.script(script, **settings)
    found = in_range(package, good, bad, releases, target.values.get("find_links", ""))
    return bisect(target, package, found, prepare_workdir(workdir), lambda probed, root: run_verification(
        probed, root, cases))


def pinned(target: Target, package: str, release: str) -> Target:
    """`target` with `package` pinned at `release` over its other pins."""
    name = canonicalize_name(package)
    others = [pin for pin in requirements(target.values.get("pins", "")) if _name(pin) != name]
    return target.replace(pins=" ".join([*others, f"{package}=={release}"]))


def _name(pin: str) -> str:
    from packaging.requirements import Requirement

    return canonicalize_name(Requirement(pin).name)


def in_range(package: str, good: str, bad: str, given: Optional[Sequence[str]], find_links: str) -> list[str]:
    """The releases from `good` to `bad`: those `given`, in their order, or
    the package index's (and `find_links`'), in version order."""
    listed = list(given) if given else available(package, find_links)
    for end, which in ((good, "good"), (bad, "bad")):
        if end not in listed:
            raise UsageError(f"the {which} release {package} {end} is not among {', '.join(listed) or 'none'}: give "
                             f"one of them, or the releases to bisect with --releases")
    lo, hi = listed.index(good), listed.index(bad)
    if lo >= hi:
        raise UsageError(f"the good release {good} must come before the bad one {bad} "
                         f"(in the order {', '.join(listed)})")
    return listed[lo:hi + 1]


def available(package: str, find_links: str) -> list[str]:
    """Every release of `package` pip finds (``pip index versions``: the
    index, as pip is configured, and `find_links`), oldest first."""
    links = [f"--find-links={link}" for link in requirements(find_links)]
    ran = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check",
                          *links], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    line = next((line for line in ran.stdout.splitlines() if line.startswith("Available versions:")), None)
    if ran.returncode != 0 or line is None:
        raise EnvError(f"pip found no releases of {package}: {(ran.stderr or ran.stdout).strip()[-2000:]}\n"
                       "give them with --releases, or where pip finds them with --find-links")
    found = [v.strip() for v in line.partition(":")[2].split(",") if v.strip()]
    try:
        return sorted(found, key=Version)
    except InvalidVersion:
        return found[::-1]  # pip lists newest first
