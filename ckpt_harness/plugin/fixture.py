"""The ``ckpt`` fixture's value: `ckpt_harness.verify`, `explore` and their script forms with the test's
defaults (its marker's, then the options'), its reports handed to the session's outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import pytest

from ckpt_harness.plugin.outcomes import fixture_reports, outputs


class CkptFixture:
    """What the ``ckpt`` fixture gives a test; defaults come from marker and options."""

    def __init__(self, defaults: dict, tmp_path: Path, item: Optional[pytest.Item] = None):
        self.defaults = defaults
        self.tmp_path = tmp_path
        self._runs = 0
        #: The test using it: a failing report's repro line and timelines go to its JUnit and pytest-html report.
        self.item = item

    @property
    def world_size(self) -> int:
        return self.defaults["world_size"]

    def verify(self, job: Union[str, type, Any], **settings: Any):
        """`ckpt_harness.verify` with this test's defaults; returns the Report.
        `job` may be a target of any kind (`ckpt_harness.targets`)."""
        from ckpt_harness.pipeline.verify import verify

        return self._call(verify, "run", job, settings)

    def explore(self, job: Union[str, type, Any], **settings: Any):
        """`ckpt_harness.explore` with this test's defaults; returns the Report."""
        from ckpt_harness.pipeline.explore import explore

        return self._call(explore, "explore", job, settings)

    def verify_script(self, script: Optional[str] = None, **settings: Any):
        """`ckpt_harness.verify_script` (an unmodified script under torchrun)
        with this test's defaults; `script` defaults to the marker's, then
        to ``--ckpt-script``. Returns the Report."""
        from ckpt_harness.pipeline.verify import verify_script

        return self._call(verify_script, "run", self._script(script), settings, "script")

    def explore_script(self, script: Optional[str] = None, **settings: Any):
        """`explore --script` with this test's defaults; returns the Report."""
        from ckpt_harness.pipeline.explore import explore_script

        return self._call(explore_script, "explore", self._script(script), settings, "script")

    def bisect_script(self, package: str, good: str, bad: str, script: Optional[str] = None, *,
                      releases: Optional[list] = None, cases: Optional[list] = None, **settings: Any):
        """`ckpt-harness bisect --script` with this test's defaults: the first
        release of `package` from `good` to `bad` whose verdict on the script
        changed, by cause. Returns the `Bisection` (`culprit` None: none did)."""
        from ckpt_harness import targets
        from ckpt_harness.pipeline.bisect import bisect_script

        script = self._script(script)
        self._runs += 1
        return bisect_script(script, package, good, bad, releases=releases, cases=cases,
                             workdir=self.tmp_path / f"ckpt-{self._runs}",
                             **self._settings(targets.takes(script, "run", "script"), settings))

    def script_config(self, script: Optional[str] = None, **settings: Any):
        """The `ScriptConfig` that ``verify_script(script, **settings)``
        runs: the call's settings over the marker's and the options', script
        mode's own defaults for the rest (its timeout is `ScriptConfig`'s, as
        `run --script`'s is, unless --ckpt-timeout or the marker gives one)."""
        from ckpt_harness import targets

        script = self._script(script)
        given = {"script": script, **self._settings(targets.takes(script, "run", "script"), settings)}
        return targets.config_of(targets.named("script"), "run", given)

    def _settings(self, takes: Any, settings: dict) -> dict:
        """The marker's and options' settings that a call taking `takes` (the
        names `targets.takes` gives) takes, then the call's own (all of them:
        a setting the call does not take is an error)."""
        return {**{k: v for k, v in self.defaults.items() if k in takes}, **settings}

    def _script(self, script: Optional[str]) -> str:
        script = script or self.defaults.get("script")
        if not script:
            raise pytest.UsageError("ckpt.verify_script needs a script: pass it, set @pytest.mark.ckpt(script=...) "
                                    "or give --ckpt-script 'train.py {ckpt_dir} ...'")
        return script

    def _call(self, fn: Any, command: str, spec: Any, settings: dict, kind: str = "job"):
        """Marker defaults that `spec` (the value of kind `kind`'s option, or
        a target) takes for `command`, then the call's own settings (all of
        them: a setting the call does not take is an error)."""
        from ckpt_harness import targets
        from ckpt_harness.errors import Unavailable

        kwargs = self._settings(targets.takes(spec, command, kind), settings)
        self._runs += 1
        kwargs.setdefault("workdir", self.tmp_path / f"ckpt-{self._runs}")
        try:
            report = fn(spec, **kwargs)
        except Unavailable as exc:
            pytest.skip(str(exc))
        if self.item is None:
            return report
        report = outputs(self.item, report) if not report.ok else report
        fixture_reports(self.item.config).append((self.item.nodeid, report))
        return report

