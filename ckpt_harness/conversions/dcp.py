"""DCP's own conversions (`torch.distributed.checkpoint.format_utils`): a DCP
directory to one `torch.save` file, and back.

Both keep everything: model and optimizer tensors at full size (DCP
assembles the shards), the per-rank extras as they were saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from ckpt_harness.conversions import _layouts


class ToTorchSave:
    reads = "dcp"
    gives = "torch_save_file"
    writes = "one torch.save file, checkpoint.pt (format_utils.dcp_to_torch_save)"
    drops: tuple[str, ...] = ()
    why_dropped = ""
    requires: Mapping[str, str] = {}

    def applies(self, source: Path) -> Optional[str]:
        return None

    def convert(self, source: Path, out: Path) -> None:
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        dcp_to_torch_save(source, out / "checkpoint.pt")

    def read(self, out: Path) -> Mapping[str, Any]:
        import torch

        return _layouts.dcp_job(torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True))

    def read_source(self, source: Path) -> Mapping[str, Any]:
        return _read_dcp(source)


class RoundTrip(ToTorchSave):
    gives = "dcp"
    writes = "a DCP directory again (dcp_to_torch_save, then torch_save_to_dcp)"

    def convert(self, source: Path, out: Path) -> None:
        from torch.distributed.checkpoint.format_utils import torch_save_to_dcp

        super().convert(source, out)
        torch_save_to_dcp(out / "checkpoint.pt", out)
        (out / "checkpoint.pt").unlink()

    def read(self, out: Path) -> Mapping[str, Any]:
        return _read_dcp(out)


def _read_dcp(path: Path) -> Mapping[str, Any]:
    """What a DCP user without a template loads: every key, full tensors."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    return _layouts.dcp_job(_load_state_dict_from_keys(checkpoint_id=path))


TO_TORCH_SAVE = ToTorchSave()
ROUND_TRIP = RoundTrip()
