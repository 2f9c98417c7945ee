"""Repo-level pytest set-up: hypothesis profiles and the environment tests assume."""

import os

from hypothesis import HealthCheck, settings

# Nothing in the tests may reach a model hub; the machines have no network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Each example launches real process groups: few examples, no per-example deadline.
settings.register_profile(
    "ci", max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True,
    database=None,
)
settings.register_profile("dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

# tests/extension is a separate package with scenario files for a check only it
# provides; tests/test_extension.py installs it and runs them itself.
collect_ignore = ["tests/extension"]
