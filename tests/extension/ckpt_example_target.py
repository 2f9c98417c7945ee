"""A kind of target of this package's own, ``module:function`` called by every torchrun worker: one
module, no line elsewhere, and it is a CLI option (``run --callable pkg.mod:train``), a matrix row, a
pytest option (``--ckpt-callable``: ``ckpt-callable::verify``) and a target the fixture takes. It is
the script target with another face: each worker runs this file, which calls the function."""

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any, ClassVar, Mapping, Optional

from ckpt_harness.config import ExplorePlan, ScriptConfig, Setting, check_settings, setting
from ckpt_harness.errors import ConfigError
from ckpt_harness.targets import ScriptTarget, TargetKind

CALLABLE = Setting("callable", str, None, "a module:function that trains, given its checkpoint dir", optional=True)


@dataclasses.dataclass(frozen=True)
class CallableConfig:
    callable: Optional[str] = dataclasses.field(default=None, metadata={"setting": CALLABLE})
    nproc_per_node: int = setting("nproc_per_node")
    timeout: float = setting("timeout", 180.0)

    def __post_init__(self) -> None:
        check_settings(self)
        if not self.callable or ":" not in self.callable:
            raise ConfigError(f"callable must be module:function, got {self.callable!r}")


@dataclasses.dataclass(frozen=True)
class CallableExploreConfig(ExplorePlan, CallableConfig):
    __post_init__ = CallableConfig.__post_init__


@dataclasses.dataclass(frozen=True)
class CallableTarget(ScriptTarget):
    """The script target running this very file, shown, replayed and set as its callable."""

    callable: str = ""
    noun: ClassVar[str] = "callable"
    COMMANDS: ClassVar[Mapping[str, type]] = {"run": CallableConfig, "explore": CallableExploreConfig}
    name = row = property(lambda self: self.callable)
    values = property(lambda self: {"callable": self.callable, "nproc_per_node": self.config.nproc_per_node,
                                    "timeout": self.config.timeout})

    @classmethod
    def of(cls, config: Any) -> "CallableTarget":
        script = ScriptConfig(script=f"{Path(__file__).resolve()} {config.callable} {{ckpt_dir}}",
                              nproc_per_node=config.nproc_per_node, timeout=config.timeout)
        return cls(script, callable=config.callable)


KIND = TargetKind("callable", "callable", CALLABLE.help, CallableTarget.COMMANDS,
                  lambda value, cls, settings: cls(**{**settings, "callable": value}), CallableTarget.of)

if __name__ == "__main__":  # a torchrun worker: call the function with the checkpoint directory
    module, _, function = sys.argv[1].partition(":")
    getattr(importlib.import_module(module), function)(sys.argv[2])
