"""Every rank says it started, starts a child of its own, and sleeps."""

import os
import subprocess
import sys
import time
from pathlib import Path

rank = os.environ["RANK"]
child = subprocess.Popen(["sleep", "1000"])
Path(sys.argv[1], f"child{rank}").write_text(str(child.pid))
Path(sys.argv[1], f"started{rank}").write_text(str(os.getpid()))
time.sleep(1000)
