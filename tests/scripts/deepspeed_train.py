"""A tiny DeepSpeed training loop as a user writes it for torchrun, on CPU:
ZeRO stage 1 with DeepSpeed's AdamW (`torch_adam`), over gloo;
`engine.save_checkpoint(OUT, tag="global_stepN")` every K steps and
`engine.load_checkpoint(OUT)` (the tag its `latest` file names) when started
again on a directory that holds one. The data of step s is a function of s
and the rank, so a resume replays it.

    deepspeed_train.py OUT [--steps N] [--save-every K] [--stage S] [--final-model] [--decoupled]
                           [--bug forget-optimizer | final-gather-on-rank-0]

--stage 3 with --final-model: once trained, the model is gathered whole
(`engine.save_16bit_model`: every rank takes part in the gather, rank 0
writes OUT/final/pytorch_model.bin), as fine-tuning scripts end.

--decoupled: DeepSpeed's decoupled checkpoint engine (`"checkpoint":
{"writer": {"decoupled": true}}`): each rank's files are written by a
checkpoint process of its own, fed through a queue; the save is committed
(`latest` written) at the next `engine.step()`. On CPU it needs the
`python` writer (the default `fast` one pins memory and needs libaio),
torchrun lacks the CROSS_RANK/CROSS_SIZE the deepspeed launcher sets, and
two DeepSpeed bugs are worked around here: ZeRO-1/2's optimizer state holds
a non-leaf view of a tensor that requires grad, which the queue refuses to
pickle (detached before it is queued), and the engine's `load` calls
`torch.load` without `weights_only=False` (torch >= 2.6 refuses the loss
scaler it pickled).

forget-optimizer: the resume passes `load_optimizer_states=False` (meant
for fine-tuning from a checkpoint): weights come back, Adam's moments and
step count start afresh.
final-gather-on-rank-0: only rank 0 gathers the final model
(`engine._zero3_consolidated_16bit_state_dict()` under `if rank == 0`),
while the others go on to the closing barrier: the gather is a collective
of every rank, so the job that trained fine hangs writing its final model
(the Open-Instruct report).
"""

import argparse
import logging
import os
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.utils import logger  # noqa: E402

def main() -> None:
    """Everything a run does: under `main()`, since the decoupled engine's
    checkpoint process is spawned, and a spawned child imports this file."""
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--stage", type=int, default=1, choices=(1, 2, 3))
    parser.add_argument("--final-model", action="store_true")
    parser.add_argument("--decoupled", action="store_true")
    parser.add_argument("--bug", choices=("forget-optimizer", "final-gather-on-rank-0"))
    args = parser.parse_args()

    logger.setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    torch.manual_seed(0)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.1, "weight_decay": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": args.stage, "stage3_gather_16bit_weights_on_model_save": args.final_model},
        "steps_per_print": 10**9,
    }
    if args.decoupled:
        os.environ.setdefault("CROSS_RANK", "0")
        os.environ.setdefault("CROSS_SIZE", "1")
        config["checkpoint"] = {"writer": {"type": "python", "decoupled": True, "data_parallel": "replica"}}
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    if args.decoupled:
        def detached(value):
            if isinstance(value, torch.Tensor):
                return value.detach()
            if isinstance(value, (list, tuple)):
                return type(value)(detached(v) for v in value)
            return {k: detached(v) for k, v in value.items()} if isinstance(value, dict) else value

        queue_save = engine.checkpoint_engine.save
        engine.checkpoint_engine.save = lambda state_dict, path: queue_save(detached(state_dict), path)
        engine.checkpoint_engine.load = lambda path, map_location=None: torch.load(path, map_location=map_location,
                                                                                   weights_only=False)

    if (args.out / "latest").exists():
        engine.load_checkpoint(str(args.out), load_optimizer_states=args.bug != "forget-optimizer")
    for step in range(engine.global_steps + 1, args.steps + 1):
        data = torch.Generator().manual_seed(1000 * step + rank)
        engine.backward(engine(torch.randn(4, 8, generator=data)).square().sum())
        engine.step()
        if step % args.save_every == 0:
            engine.save_checkpoint(str(args.out), tag=f"global_step{step}")
    if args.final_model and args.bug == "final-gather-on-rank-0":
        if rank == 0:
            (args.out / "final").mkdir(exist_ok=True)
            torch.save(engine._zero3_consolidated_16bit_state_dict(), args.out / "final" / "pytorch_model.bin")
    elif args.final_model:
        engine.save_16bit_model(str(args.out / "final"))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
