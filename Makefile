# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv with the CPU build of torch and the package installed.
# `make matrix` runs the whole matrix (every built-in job, every scenario).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo matrix test lint bench clean browser

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,hf,deepspeed,lightning,data,s3,s3torchconnector]'
	# DeepSpeed's CPU comm op is built with gcc on first use (minutes on a cold
	# machine). The harness builds it itself before its first deadline, on any
	# install path; doing it here too keeps that build out of the tests' time.
	$(PY) -c "from ckpt_harness.jit import ensure_built; from ckpt_harness.jobs.deepspeed_job import DeepSpeedJob; ensure_built(DeepSpeedJob.jit_ops())"
	touch $(STAMP)

# The demo is a slice of the matrix, chosen with docs/matrix.json's recorded
# times to finish within 3 minutes on 2 cores: one job per framework family
# (plain torch.save, DCP, DeepSpeed ZeRO, the HF Trainer) against a cheap
# scenario of 7 of the 11 properties: every row has a failing cell, DeepSpeed
# and the HF Trainer several (2.0 min at a load of 8-11 on 2 cores). Plain
# options rather than a preset in the CLI: make prints what runs, and it can
# be copied into a command line and changed.
DEMO_JOBS := torch_save dcp deepspeed hf_trainer
DEMO_SCENARIOS := unsafe-load,power-loss-during-save,power-loss-after-save,overwrite-larger-world,world-size-grow,resume-every-save,final-save-blocked

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/ckpt-harness matrix $(addprefix --job ,$(DEMO_JOBS)) --scenarios $(DEMO_SCENARIOS) --out ckpt-matrix --html ckpt-matrix/matrix.html

# The whole matrix: 10 rows x 33 scenarios, about 20 minutes on 2 cores (docs/matrix.md).
matrix: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/ckpt-harness matrix --out ckpt-matrix

# Three workers on two cores: a test often waits on its ranks (startup, deadlines,
# failure grace), so a third fills the waits. loadgroup hands tests out one at a
# time, longest module first, and keeps the tests sharing a module fixture on one
# worker (tests/conftest.py): 932 tests in 9:51 on 2026-11-26 (docs/speed.md).
# The report's tests look with a real browser and a real trace parser: installed
# once here where the machine can (ci/install_browser.sh), skipped with the reason where not.
BROWSER := $(VENV)/.browser
$(BROWSER): $(STAMP) ci/install_browser.sh tests/js/package-lock.json
	@bash ci/install_browser.sh
	@touch $@
browser: $(BROWSER)

test: lint $(BROWSER)
	@# Every rank, torchrun worker and pytester run is a fresh interpreter: compiled once
	@# here, the package's and the tests' modules are not compiled again in each (a box
	@# with PYTHONDONTWRITEBYTECODE set never caches them otherwise).
	@$(PY) -m compileall -q ckpt_harness tests ci
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n 3 --dist loadgroup --no-loadscope-reorder -p no:cacheprovider --durations=25 $(PYTEST_ARGS)
	@$(PY) ci/no_orphans.py

lint: $(STAMP)
	$(VENV)/bin/ruff check ckpt_harness tests ci conftest.py

clean:
	rm -rf $(VENV) *.egg-info

bench: $(STAMP)
	$(PY) ci/benchmark.py
