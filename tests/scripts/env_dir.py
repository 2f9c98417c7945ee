"""resumable.py told where its checkpoints go by the environment, as a script may be.

Its directory is CKPT_HARNESS_CKPT_DIR, which the harness sets on every
run, not an argument: its command has no {ckpt_dir}, and it runs.

    env_dir.py [resumable.py's options]
"""

import os
import runpy
import sys
from pathlib import Path

sys.argv = [str(Path(__file__).with_name("resumable.py")), os.environ["CKPT_HARNESS_CKPT_DIR"], *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
