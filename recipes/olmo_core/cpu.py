"""Every CPU adaptation of the OLMo-core recipe, in this one module.

Active only where no GPU is present (`torch.cuda.is_available()` false); on
a GPU machine each value below is OLMo-core's own default and nothing is
patched. Nothing here touches checkpoint code: OLMo-core 3.0.0 runs its
Trainer, DDP train module and Checkpointer on gloo unchanged (its own test
utilities run on gloo), so the only adaptation is the backend string.
"""

import torch

#: True on a machine without a CUDA device: the recipe runs on CPU.
NO_GPU = not torch.cuda.is_available()

#: `prepare_training_environment(backend=...)`. OLMo-core's default,
#: "cpu:gloo,cuda:nccl", asks for NCCL, which the CPU build of torch lacks
#: ("Distributed package doesn't have NCCL built in"); without a GPU every
#: collective goes over gloo instead. Gloo also takes CPU tensors, so
#: `CheckpointerCallback.save_async`'s default (async where the backend
#: supports CPU) is unchanged in meaning.
BACKEND = "gloo" if NO_GPU else "cpu:gloo,cuda:nccl"
