"""A kind of target of this package's own: ``module:function``, called by every torchrun worker.

One module is what a new kind of target costs: its settings (a config
class per command), the target, and a `TargetKind` registered under the
entry-point group ``ckpt_harness.targets``. The harness's pipelines,
checks, benches and surfaces run it unchanged: ``ckpt-harness run
--callable pkg.mod:train``, ``explore --callable``, ``scenario``,
``ckpt.verify(CallableTarget.of(...))``. It runs on the script target: each
worker runs this very file, which imports the function and calls it with
the checkpoint directory.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any, ClassVar, Mapping, Optional

from ckpt_harness.config import ScriptConfig, Setting, cli_args, plus_plan, setting, settings_of
from ckpt_harness.errors import ConfigError
from ckpt_harness.targets import ScriptTarget, TargetKind
from ckpt_harness.targets.base import repro_line

CALLABLE = Setting("callable", str, None, "a module:function that trains, called in every torchrun worker with the "
                   "checkpoint directory", optional=True)


@dataclasses.dataclass(frozen=True)
class CallableConfig:
    callable: Optional[str] = dataclasses.field(default=None, metadata={"setting": CALLABLE})
    nproc_per_node: int = setting("nproc_per_node")
    timeout: float = setting("timeout", 180.0)

    def __post_init__(self) -> None:
        for name, s in settings_of(type(self)).items():
            object.__setattr__(self, name, s.check(getattr(self, name)))
        if not self.callable or ":" not in self.callable:
            raise ConfigError(f"callable must be module:function, got {self.callable!r}")


@plus_plan(hang_timeout=60.0)
class CallableExploreConfig(CallableConfig):
    """A callable whose save `save` is broken at every point."""


@dataclasses.dataclass(frozen=True)
class CallableTarget:
    config: CallableConfig
    #: How it runs: this file as a script under torchrun.
    inner: ScriptTarget
    noun: ClassVar[str] = "callable"
    COMMANDS: ClassVar[Mapping[str, type]] = {"run": CallableConfig, "explore": CallableExploreConfig}

    @classmethod
    def of(cls, config: CallableConfig) -> "CallableTarget":
        config = CallableConfig(**{name: getattr(config, name) for name in settings_of(CallableConfig)})
        script = ScriptConfig(script=f"{Path(__file__).resolve()} {config.callable} {{ckpt_dir}}",
                              nproc_per_node=config.nproc_per_node, timeout=config.timeout)
        return cls(config, ScriptTarget(script))

    name = property(lambda self: self.config.callable)
    row = name
    world_size = property(lambda self: self.inner.world_size)
    timeout = property(lambda self: self.inner.timeout)
    caps = property(lambda self: self.inner.caps)

    @property
    def values(self) -> dict[str, Any]:
        return {name: getattr(self.config, name) for name in settings_of(CallableConfig)}

    def preflight(self) -> None:
        self.inner.preflight()

    def warm(self, parallel: int) -> None:
        self.inner.warm(parallel)

    def run(self, request, ckpt_dir, run_dir):
        return self.inner.run(request, ckpt_dir, run_dir)

    def knowing(self, golden) -> "CallableTarget":
        return dataclasses.replace(self, inner=self.inner.knowing(golden))

    def save_steps(self):
        return self.inner.save_steps()

    def savers(self, step):
        return self.inner.savers(step)

    def saves_in_background(self) -> bool:
        return self.inner.saves_in_background()

    def with_settings(self, params: Mapping[str, Any]) -> "CallableTarget":
        return dataclasses.replace(self, inner=self.inner.with_settings(params))

    def replace(self, **changes: Any) -> "CallableTarget":
        return CallableTarget.of(dataclasses.replace(self.config, **changes)) if changes else self

    def plan_defaults(self) -> Mapping[str, Any]:
        return self.inner.plan_defaults()

    def cli_args(self, command: str, plan: Mapping[str, Any] = {}) -> list[str]:
        return cli_args({**self.values, **plan}, settings_of(self.COMMANDS.get(command, CallableConfig)))

    def bench_args(self) -> list[str]:
        return self.cli_args("run")

    def repro(self, command: str, plan: Mapping[str, Any] = {}, case: Optional[str] = None) -> str:
        return repro_line(self, command, plan, case)

    def shell(self, args: list[str]) -> str:
        return self.inner.shell(args)


KIND = TargetKind("callable", "callable", CALLABLE.help, CallableTarget.COMMANDS,
                  lambda value, cls, settings: cls(**{**settings, "callable": value}), CallableTarget.of)


if __name__ == "__main__":  # a torchrun worker: call the function with the checkpoint directory
    module, _, function = sys.argv[1].partition(":")
    getattr(importlib.import_module(module), function)(sys.argv[2])
