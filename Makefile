# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv with the CPU build of torch and the package installed.
# `make matrix` runs the whole matrix (every built-in job, every scenario).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo matrix test test-slow test-trainers lint docs bench clean browser deepspeed-older

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev,hf,deepspeed,lightning,data,s3,s3torchconnector]'
	# DeepSpeed's CPU comm op is built with gcc on first use (minutes on a cold
	# machine). The harness builds it itself before its first deadline, on any
	# install path; doing it here too keeps that build out of the tests' time.
	$(PY) -c "from ckpt_harness.jit import ensure_built; from ckpt_harness.jobs.deepspeed_job import DeepSpeedJob; ensure_built(DeepSpeedJob.jit_ops())"
	touch $(STAMP) $(DEMO_STAMP)

# The demo's set-up: only what its rows run (the HF Trainer's transformers), and no bytecode compiled at
# install (--no-compile): pip compiles every module of torch and transformers (33 s of 52 for torch alone,
# measured), where the demo imports a fraction of them, compiled on first import (issue 65, item 5).
$(DEMO_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e '.[hf]'
	touch $(DEMO_STAMP)

# The demo is a slice of the matrix, chosen with docs/matrix.json's recorded times to finish within
# 2:30 from a clean clone on 2 cores: plain torch.save, DCP and the HF Trainer against a cheap scenario
# of 7 of the properties, a failing cell in every row and several in the HF Trainer's. DeepSpeed's row
# is left to `make matrix` (docs/matrix.md): its CPU comm op is built with gcc on first use, 95-160 s on
# 2 cores, which the slice cannot hide (measured in docs/speed.md). Plain options rather than a preset
# in the CLI: make prints what runs, and it can be copied into a command line and changed.
DEMO_JOBS := torch_save dcp hf_trainer
DEMO_SCENARIOS := unsafe-load,power-loss-during-save,power-loss-after-save,overwrite-larger-world,world-size-grow,resume-every-save,final-save-blocked

demo: $(DEMO_STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/ckpt-harness matrix $(addprefix --job ,$(DEMO_JOBS)) --scenarios $(DEMO_SCENARIOS) --out ckpt-matrix --html ckpt-matrix/matrix.html
	@echo "make demo: exit 0. The FAIL cells above are the frameworks' findings, shown on purpose; a matrix exits non-zero only for what --fail-on counts (default unknown,error: a cell the harness could not judge). Open ckpt-matrix/matrix.html; the rule: docs/getting-started.md#verdicts-and-exit-codes"

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

test: lint docs $(BROWSER)
	@# Every rank, torchrun worker and pytester run is a fresh interpreter: compiled once
	@# here, the package's and the tests' modules are not compiled again in each (a box
	@# with PYTHONDONTWRITEBYTECODE set never caches them otherwise).
	@$(PY) -m compileall -q ckpt_harness tests ci
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n 3 --dist loadgroup --no-loadscope-reorder -p no:cacheprovider --durations=25 \
		-m "not trainers and not slow" $(PYTEST_ARGS)
	@$(PY) ci/no_orphans.py

# The suite's second faces (marked `slow`): each proves again, through the plugin, a matrix, a second
# signal or job, a check `make test` proves both ways through one face (pyproject.toml's markers say
# which). Kept out of CI's run for its 25-minute budget; run them with test-trainers before a release
# and after touching the plugin, the matrix or the bisect. Measured in docs/speed.md.
test-slow: $(STAMP)
	@$(PY) -m compileall -q ckpt_harness tests ci
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n 3 --dist loadgroup --no-loadscope-reorder -p no:cacheprovider --durations=10 \
		-m slow $(PYTEST_ARGS)
	@$(PY) ci/no_orphans.py

# The tests that run a real trainer's own loop under torchrun (marked `trainers`: Lightning, the HF Trainer,
# accelerate, DeepSpeed and torchtitan scripts, each run a fresh interpreter importing the framework): a quarter
# of the suite's CPU for 2% of its tests, so `make test` (CI's) leaves them here. Run them before a release
# and after touching the framework entry points (inject/saves.py, the bootstrap). Measured in docs/speed.md.
test-trainers: $(STAMP)
	@$(PY) -m compileall -q ckpt_harness tests ci
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n 3 --dist loadgroup --no-loadscope-reorder -p no:cacheprovider --durations=10 \
		-m trainers $(PYTEST_ARGS)
	@$(PY) ci/no_orphans.py

# The manual: docs/ as a site in site/ (mkdocs.yml). --strict fails on any warning, and mkdocs.yml's
# validation makes a link to a missing page or anchor, an absolute link and a page left out of the nav
# warnings: a renamed file or a dead anchor fails `make test` (tests/test_docs_site.py shows it both ways).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check ckpt_harness tests ci conftest.py

clean:
	rm -rf $(VENV) *.egg-info

bench: $(STAMP)
	$(PY) ci/benchmark.py

# An older DeepSpeed than constraints.txt's (issue 64): the harness's DeepSpeed warm-ups (its comm-op
# builder, the lazy modules its warm parent pre-imports) are made on 0.19, and 0.18 lacks modules they
# name; they must step aside with a note and the runs be judged as usual. Its own venv (torch 2.13.0 CPU,
# DeepSpeed 0.18.9 built from its sdist: a few minutes, once) and its own TORCH_EXTENSIONS_DIR (the comm
# op is built per release with gcc: minutes, once); the harness's build stamp is removed before each
# check so that its op builder runs every time, as on a user's first run. ZeRO-3 for the script: on
# torch 2.13, 0.18.9's ZeRO-1/2 step fails under a bare torchrun too ("Output 0 of Split is a view and
# is being modified inplace"), which the harness rightly judges an ERROR of the script. Not in `make
# test`: 12 minutes from nothing on the 2-core box at a load of 4-10 (installing 6, with DeepSpeed's
# wheel already in pip's cache; gcc 5), 1.5 minutes once installed and built.
DS_OLDER := .venv-ds018
DS_OLDER_ENV := DS_ACCELERATOR=cpu HF_HUB_OFFLINE=1 TORCH_EXTENSIONS_DIR=$(CURDIR)/$(DS_OLDER)/torch_extensions

$(DS_OLDER)/.installed: pyproject.toml
	$(PYTHON) -m venv $(DS_OLDER)
	$(DS_OLDER)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 deepspeed==0.18.9 -e .
	touch $@

deepspeed-older: $(DS_OLDER)/.installed
	rm -f $(DS_OLDER)/torch_extensions/.ckpt-harness-deepspeed_shm_comm.built
	$(DS_OLDER_ENV) $(DS_OLDER)/bin/ckpt-harness run --keep none --nproc-per-node 2 \
		--script '$(CURDIR)/tests/scripts/deepspeed_train.py {ckpt_dir} --steps 4 --save-every 2 --stage 3'
	rm -f $(DS_OLDER)/torch_extensions/.ckpt-harness-deepspeed_shm_comm.built
	$(DS_OLDER_ENV) $(DS_OLDER)/bin/ckpt-harness run --keep none --job deepspeed_zero3 --steps 4 --save-every 2

# The real trainers (issue 66): a venv per recipe under recipes/ (.venv-<name>: torch 2.13.0 CPU, the trainer
# pinned in recipes/<name>/requirements.txt, the harness), with uv where it is on PATH, else pip; every install
# takes -c recipes/constraints.txt (torch==2.13.0: any other torch spec pulls a multi-GB CUDA build). Then each
# recipe's matrix (recipes/<name>/harness.json: its --script, --script-args and scenarios), written to
# docs/matrix-trainers.md with the versions and times (recipes/harness.py). Not in `make test`: minutes per
# recipe (each torchrun run of OLMo-core is 35-45 s on the 2-core box). TRAINER_SCENARIOS=all for the whole
# catalogue (hours at that cost). uv reads no pip.conf: where torch's CPU build comes from a local index or
# find-links (this machine kind's /etc/pip.conf), give uv the same (UV_FIND_LINKS, UV_INDEX) or pass
# TRAINER_UV= to use pip. Measured 2026-12-07 (no uv here, pip): 332 s from nothing, the matrix 21 min.
# A recipe's requirements-nodeps.txt, if any, is installed last with --no-deps --ignore-requires-python:
# for a wheel whose metadata is wrong for this Python (megatron-core 0.19.2's cp311 wheel asks for 3.12),
# its real dependencies listed in requirements.txt.
# A recipe's uninstall.txt, if any, names packages removed after everything else is installed (`pip
# uninstall -y -r`): a hard requirement of the trainer whose only wheel is a CUDA build that breaks imports
# under the CPU torch (llamafactory 0.9.5's torchvision and torchaudio: recipes/llamafactory/uninstall.txt).
TRAINERS ?= olmo_core megatron_core torchtitan llamafactory
TRAINER_SCENARIOS ?=
TRAINER_UV ?= $(shell command -v uv)
TRAINER_PIP = $(if $(TRAINER_UV),$(TRAINER_UV) pip install --python $(1)/bin/python $(2),$(1)/bin/pip install \
	--quiet --disable-pip-version-check $(2))
TRAINER_UNINSTALL = $(if $(TRAINER_UV),$(TRAINER_UV) pip uninstall --python $(1)/bin/python $(2),$(1)/bin/pip \
	uninstall -y --quiet --disable-pip-version-check $(2))

.venv-%/.installed: recipes/%/requirements.txt recipes/constraints.txt pyproject.toml
	@start=$$(date +%s); \
	$(if $(TRAINER_UV),$(TRAINER_UV) venv --python $(PYTHON) .venv-$*,$(PYTHON) -m venv .venv-$*) && \
	$(call TRAINER_PIP,.venv-$*,torch==2.13.0) && \
	$(call TRAINER_PIP,.venv-$*,-c recipes/constraints.txt -r recipes/$*/requirements.txt) && \
	{ test ! -f recipes/$*/requirements-nodeps.txt || \
	  $(call TRAINER_PIP,.venv-$*,--no-deps --ignore-requires-python -r recipes/$*/requirements-nodeps.txt); } && \
	$(call TRAINER_PIP,.venv-$*,-c recipes/constraints.txt -e .) && \
	{ test ! -f recipes/$*/uninstall.txt || $(call TRAINER_UNINSTALL,.venv-$*,-r recipes/$*/uninstall.txt); } && \
	echo $$(( $$(date +%s) - start )) > .venv-$*/.install-seconds && \
	echo ".venv-$*: installed in $$(cat .venv-$*/.install-seconds) s"
	touch $@

trainers: $(foreach t,$(TRAINERS),.venv-$(t)/.installed)
	$(PYTHON) recipes/harness.py $(if $(TRAINER_SCENARIOS),--scenarios '$(TRAINER_SCENARIOS)') $(TRAINERS)

.PHONY: trainers
