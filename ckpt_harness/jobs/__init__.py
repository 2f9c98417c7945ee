"""Built-in jobs: reference trainers the harness can break without user code.

They double as positive controls (a correct checkpointing scheme must pass
the whole catalogue) and as the harness's own regression targets. The
registry holds "module:Class" strings, not classes, so listing jobs (CLI
`list`, plugin option parsing) never pays for importing torch.

Other packages add jobs under the entry-point group `ckpt_harness.jobs`
(`name = "module:Class"`); they follow the built-in ones, in name order.
"""

from __future__ import annotations

import functools

from ckpt_harness.extensions import with_entry_points

ENTRY_POINT_GROUP = "ckpt_harness.jobs"

#: In the order a default matrix shows them: plain torch first, then by framework.
BUILTIN_JOBS: dict[str, str] = {
    "torch_save": "ckpt_harness.jobs.torch_save:TorchSaveJob",
    "dcp": "ckpt_harness.jobs.dcp:DcpJob",
    "dcp_async": "ckpt_harness.jobs.dcp_async:DcpAsyncJob",
    "dcp_async_process": "ckpt_harness.jobs.dcp_async:DcpAsyncProcessJob",
    "dcp_s3connector": "ckpt_harness.jobs.dcp_s3connector:DcpS3ConnectorJob",
    "deepspeed_zero0": "ckpt_harness.jobs.deepspeed_job:DeepSpeedZero0",
    "deepspeed": "ckpt_harness.jobs.deepspeed_job:DeepSpeedZero1",
    "deepspeed_zero2": "ckpt_harness.jobs.deepspeed_job:DeepSpeedZero2",
    "deepspeed_zero3": "ckpt_harness.jobs.deepspeed_job:DeepSpeedZero3",
    "hf_trainer": "ckpt_harness.jobs.hf_trainer:HFTrainerJob",
}

DESCRIPTIONS: dict[str, str] = {
    "deepspeed": "DeepSpeed ZeRO-1 engine on CPU/gloo; save_checkpoint/load_checkpoint with its `latest` file, "
                 "per-rank RNG/data side files (extra: deepspeed)",
    "deepspeed_zero0": "the deepspeed job at ZeRO stage 0",
    "deepspeed_zero2": "the deepspeed job at ZeRO stage 2",
    "deepspeed_zero3": "the deepspeed job at ZeRO stage 3 (parameters partitioned too)",
    "hf_trainer": "transformers.Trainer (owns its loop; DDP over gloo) on a tiny Llama from a config; its own "
                  "checkpoint-N dirs, get_last_checkpoint resume, save_total_limit rotation (extra: hf)",
    "torch_save": (
        "DDP MLP; rank 0 torch.save()s model/optimizer/scheduler, "
        "every rank its RNG and data position; `latest` pointer"
    ),
    "dcp": (
        "FSDP2 fully_shard MLP on a CPU mesh; torch.distributed.checkpoint "
        "of sharded state plus per-rank extras; `latest` pointer"
    ),
    "dcp_async": (
        "the dcp job saved with dcp.async_save (thread executor) on its own gloo checkpoint group; "
        "`latest` moves once the save's future completed and its files are fsynced"
    ),
    "dcp_async_process": "dcp_async with DCP's process executor (a checkpoint process per rank)",
    "dcp_s3connector": ("the dcp job on a bucket only, through s3torchconnector's DCP writer and reader (AWS's "
                        "native client; extra: s3torchconnector)"),
}



@functools.lru_cache(maxsize=None)
def registry() -> dict[str, str]:
    """Every named job, name -> "module:Class": the built-in ones, then those of installed packages."""
    return with_entry_points(ENTRY_POINT_GROUP, BUILTIN_JOBS)


def describe(name: str) -> str:
    return DESCRIPTIONS.get(name) or registry()[name]


__all__ = ["BUILTIN_JOBS", "DESCRIPTIONS", "ENTRY_POINT_GROUP", "describe", "registry"]
