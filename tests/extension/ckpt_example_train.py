"""A console script in the shape of ``llamafactory-cli train config.yaml``:
the training's options, its checkpoint directory among them, come from a
YAML file the command names. It runs the suite's resumable DDP script
(tests/scripts/resumable.py) with them, staging each save."""

import runpy
import sys

import yaml


def main() -> None:
    if sys.argv[1:2] != ["train"] or len(sys.argv) < 3:
        sys.exit("usage: ckpt-example-train train CONFIG.yaml [ARGS...]")
    with open(sys.argv[2]) as f:
        options = yaml.safe_load(f)
    sys.argv = ["resumable", str(options["output_dir"]), "--steps", str(options["max_steps"]),
                "--save-every", str(options["save_steps"]), "--staging", *sys.argv[3:]]
    runpy.run_module("tests.scripts.resumable", run_name="__main__")
