"""One torch elastic agent, tied to the harness: ``python -m torch.distributed.run`` exactly,
after one prctl.

``python -m ckpt_harness.launch.agent HARNESS_PID TORCHRUN_ARGS...`` asks the
kernel to SIGKILL the agent when the harness dies (a SIGKILLed harness runs
no cleanup) and then hands over to torchrun's own ``__main__``. The prctl
is done here rather than in a `preexec_fn`, which is unsafe in a harness
that runs groups from several threads. The parent-death signal follows the
harness *thread* that started the agent; `run_elastic` outlives its agents.
"""

import runpy
import sys

from ckpt_harness.launch import _proc

if __name__ == "__main__":
    _proc.die_with_parent(int(sys.argv[1]))
    sys.argv = ["torchrun", *sys.argv[2:]]
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
