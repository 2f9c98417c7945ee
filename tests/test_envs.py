"""Environments for a set of package pins (`ckpt_harness.launch.envs`), for real: venvs and pip, offline.

The pins are releases of tinyckpt, a tiny checkpoint package whose wheels `tests.tinypkgs` writes by hand into
a directory pip reads with ``--find-links DIR --no-index``: nothing is downloaded, and pip's cache and config
are kept inside the test's temporary directories. Every tinyckpt release requires torch, which no wheel
directory here holds: an install succeeds only because pip, run under the env's interpreter, sees the base's
torch through the layering.

One wheel directory and one root of environments are shared by the module (each build is a pip run, seconds);
tests that need a root to themselves (failures, interruptions, races) get their own. A script run under
torchrun in such an environment, saving with one release and resuming with another, is tests/test_upgrades.py's.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from ckpt_harness.launch.envs import META, EnvError, Pins, made
from tests import tinypkgs

REPO = Path(__file__).resolve().parents[1]

#: A process that makes one environment and says so: argv = root, wheel dir, pin.
MAKE = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # a test runner's worker may have SIGINT ignored
from ckpt_harness.launch.envs import Pins, made
pins = Pins([sys.argv[3]], find_links=[sys.argv[2]], no_index=True)
env = made(pins, sys.argv[1], lambda line: print(line, flush=True))
print("ENV", env.path, flush=True)
"""


@pytest.fixture(scope="module", autouse=True)
def _pip_inside(tmp_path_factory):
    """pip's cache in the test's temporary directory, no pip config of this box's (an index, find-links)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIP_CACHE_DIR", str(tmp_path_factory.mktemp("pip-cache")))
        mp.setenv("PIP_CONFIG_FILE", os.devnull)
        for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
            mp.delenv(name, raising=False)
        yield


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """Every tinyckpt release, and an iniconfig 99.0 to shadow the base's iniconfig (pytest's, always there)."""
    found = tinypkgs.build(tmp_path_factory.mktemp("wheels"))
    tinypkgs.write_wheel(found, "iniconfig", "99.0", {"iniconfig/__init__.py": "SHADOW = True\n"})
    return found


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("envs")


def pins(wheels: Path, *given: str) -> Pins:
    return Pins(given, find_links=(str(wheels),), no_index=True)


@pytest.fixture(scope="module")
def first(wheels, root):
    """The tinyckpt 1.0.0 environment, what its build said, and how long it took."""
    said: list[str] = []
    started = time.monotonic()
    env = made(pins(wheels, "tinyckpt==1.0.0"), root, said.append)
    return env, said, time.monotonic() - started


def leftovers(root: Path) -> list[str]:
    return sorted(path.name for path in root.iterdir() if not path.name.endswith(".lock"))


def processes_naming(text: str) -> list[int]:
    """The live processes whose command line holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.fsencode(text) in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def gone(text: str, within: float = 10.0) -> list[int]:
    """The processes still naming `text` after up to `within` seconds: a SIGKILLed process under load can take
    a moment to be scheduled and die."""
    deadline = time.monotonic() + within
    while (found := processes_naming(text)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def start_making(root: Path, wheels: Path, pin: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", MAKE, str(root), str(wheels), pin], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_for_pip(root: Path, proc: subprocess.Popen) -> Path:
    """The building directory of `proc`'s build, once its pip runs."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for building in root.glob(".building-*"):
            if (building / META / "pip.pid").exists():
                return building
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.01)
    raise AssertionError(f"no pip run started under {root}")


def test_an_env_imports_its_pin_over_the_base_and_is_made_once(first):
    env, said, seconds = first
    assert env.path.name == env.pins.key and env.python == env.path / "bin" / "python", env
    assert len(said) == 2 and "tinyckpt==1.0.0" in said[0] and re.search(r"made in [\d.]+ s", said[1]), said
    # tinyckpt imports torch when it saves or loads; finding torch's spec is what an import of it would take
    # (its import proper, 2 s of CPU, is test_upgrades.py's, under torchrun)
    code = "import json, importlib.util, tinyckpt, ckpt_harness; print(json.dumps([tinyckpt.__file__, " \
           "importlib.util.find_spec('torch').origin, ckpt_harness.__file__, tinyckpt.__version__]))"
    ran = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, timeout=300, check=True)
    tiny, torch_file, harness, version = json.loads(ran.stdout)
    assert version == "1.0.0" and Path(tiny).is_relative_to(env.path), tiny
    base_torch = importlib.util.find_spec("torch").origin  # the base's: the env imports the very same files
    assert torch_file == base_torch and not Path(torch_file).is_relative_to(env.path), torch_file
    assert Path(harness).is_relative_to(REPO), harness
    base = {name: importlib.metadata.version(name) for name in ("torch", "ckpt-harness")}
    assert env.versions(["tinyckpt", "torch", "ckpt-harness", "no-such-dist"]) == {"tinyckpt": "1.0.0", **base}

    again: list[str] = []
    started = time.monotonic()
    assert made(env.pins, env.path.parent, again.append) == env
    assert time.monotonic() - started < 1.0 and not again, again
    print(f"\nbuilt in {seconds:.1f} s, reused in {time.monotonic() - started:.4f} s")


def test_another_pin_is_another_env_that_shadows_the_base_and_leaves_it_alone(first, wheels, root):
    """tinyckpt 2.0.0 beside 1.0.0, and an iniconfig that shadows the base's: pip installs it into the env,
    says it leaves the base's where it is, and the base still has its own."""
    env_1, _, _ = first
    base_iniconfig = importlib.metadata.version("iniconfig")
    env_2 = made(pins(wheels, "tinyckpt==2.0.0", "iniconfig==99.0"), root)
    assert env_2.path != env_1.path and env_2.path.parent == env_1.path.parent
    assert env_2.versions(["tinyckpt", "iniconfig"]) == {"tinyckpt": "2.0.0", "iniconfig": "99.0"}
    assert env_1.versions(["tinyckpt", "iniconfig"]) == {"tinyckpt": "1.0.0", "iniconfig": base_iniconfig}
    assert "Not uninstalling iniconfig" in (env_2.path / META / "pip.out").read_text()
    assert importlib.metadata.version("iniconfig") == base_iniconfig


def test_a_release_that_does_not_exist_is_an_env_error_with_pips_words(wheels, tmp_path):
    with pytest.raises(EnvError) as caught:
        made(pins(wheels, "tinyckpt==9.9"), tmp_path / "envs")
    message = str(caught.value)
    assert "tinyckpt==9.9" in message and "No matching distribution found for tinyckpt==9.9" in message, message
    assert "check that each pin names a release that exists" in message, message
    assert leftovers(tmp_path / "envs") == [], "a failed build leaves its lock file only"


def test_pip_past_its_deadline_is_ended_with_an_env_error(wheels, tmp_path):
    with pytest.raises(EnvError, match="within its deadline of 0.2 s") as caught:
        made(pins(wheels, "tinyckpt==1.0.0"), tmp_path / "envs", deadline=0.2)
    assert "longer deadline" in str(caught.value), caught.value
    assert leftovers(tmp_path / "envs") == [] and gone(str(tmp_path / "envs")) == []


@pytest.mark.parametrize("given", [["tinyckpt=1.0"], ["; touch pwned"], ["tinyckpt==1.0.0", "--index-url=x"],
                                   ["tinyckpt==1.0.0", "TinyCkpt==1.1.0"], []])
def test_a_string_that_is_not_a_pin_is_refused_before_anything_runs(given, wheels, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as caught:
        made(pins(wheels, *given), tmp_path / "envs")
    assert "e.g. '" in str(caught.value), caught.value
    assert not (tmp_path / "envs").exists() and not (REPO / "pwned").exists() and not list(tmp_path.rglob("pwned"))


def test_pins_are_normalized_so_one_set_is_one_env(wheels):
    one = Pins(["TinyCkpt == 1.0.0", "iniconfig>=1,<100"], find_links=[wheels], no_index=True)
    other = Pins(("iniconfig<100,>=1", "tinyckpt==1.0.0"), find_links=(str(wheels),), no_index=True)
    assert one == other and one.key == other.key and one.pins == ("iniconfig<100,>=1", "tinyckpt==1.0.0")
    assert Pins(["tinyckpt==1.0.0"]).key != Pins(["tinyckpt==1.0.0"], find_links=[wheels]).key


@pytest.fixture(scope="module")
def contested(wheels, tmp_path_factory) -> dict:
    """The life of one key, tinyckpt==1.1.0, in a root of its own: a build stopped by SIGINT (Ctrl-C), one by
    SIGTERM, one killed by SIGKILL (its directory and its pip left behind), then two processes asking for it at
    once. What each step left, for the tests below (one build serves them: each is a pip run)."""
    root = tmp_path_factory.mktemp("contested")
    seen: dict = {"root": root}
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc = start_making(root, wheels, "tinyckpt==1.1.0")
        building = wait_for_pip(root, proc)
        os.kill(proc.pid, sig)
        try:
            output = proc.communicate(timeout=120)[0]
        except subprocess.TimeoutExpired:  # what kept it from ending: its state and signals, for the report
            status = [line for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                      if line.startswith(("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))]
            proc.kill()
            raise AssertionError(f"{sig.name} did not end the build in 120 s: {status}; it said "
                                 f"{proc.communicate()[0]!r}") from None
        seen[sig.name] = {"returncode": proc.returncode, "output": output, "leftovers": leftovers(root),
                          "pip": gone(str(building))}
    killed = start_making(root, wheels, "tinyckpt==1.1.0")
    seen["stale"] = wait_for_pip(root, killed)
    killed.kill()
    killed.communicate(timeout=60)
    seen["stale_left"] = seen["stale"].exists()
    racers = [start_making(root, wheels, "tinyckpt==1.1.0") for _ in range(2)]
    seen["race"] = [(proc.communicate(timeout=300)[0], proc.returncode) for proc in racers]
    seen["leftovers"] = leftovers(root)
    return seen


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupted_build_leaves_nothing_behind(sig, contested):
    """Ctrl-C or SIGTERM while pip runs: pip's whole process group ends, the building directory goes, no
    environment appears (the next `made` makes it: see the race below)."""
    seen = contested[sig]
    assert seen["returncode"] != 0 and "ENV" not in seen["output"], seen["output"]
    assert seen["leftovers"] == [], seen
    assert seen["pip"] == [], "pip outlived the interrupted build"


def test_two_processes_make_one_env_once_over_a_killed_build(contested, wheels):
    """A build killed with SIGKILL leaves its directory and a running pip; the next build of that key ends
    that pip and removes the directory. Two processes asking for the key at once: one builds, both use it."""
    assert contested["stale_left"], "the SIGKILLed build should have left its directory"
    outputs = [output for output, _ in contested["race"]]
    assert [code for _, code in contested["race"]] == [0, 0], outputs
    assert sum(output.count("making it in") for output in outputs) == 1, outputs
    assert sum("waiting for another process" in output for output in outputs) <= 1, outputs
    paths = {line for output in outputs for line in output.splitlines() if line.startswith("ENV ")}
    assert len(paths) == 1, outputs
    assert contested["leftovers"] == [pins(wheels, "tinyckpt==1.1.0").key], outputs
    assert gone(str(contested["stale"])) == []


def release(version: str):
    """A tinyckpt release as a module of its own, from the source its wheel holds."""
    module = types.ModuleType(f"tinyckpt_{version.replace('.', '_')}")
    exec(compile(tinypkgs.RELEASES[version].replace("@VERSION@", version), module.__name__, "exec"), module.__dict__)
    return module


def test_the_tinyckpt_releases_differ_as_their_docstrings_say(tmp_path):
    """What the releases axis will find: 1.x resumes one another; 2.0.0 loads a 1.x file without its
    optimizer and without an error; 2.1.0 takes step_8.pt for newer than step_10.pt."""
    good, v2, v21 = release("1.0.0"), release("2.0.0"), release("2.1.0")
    state = {"model": {"w": 1}, "optimizer": {"lr": 0.1}, "step": 10}
    assert good.latest(str(tmp_path)) is None
    for step in (8, 10):
        good.save(f"{tmp_path}/step_{step}.pt", {**state, "step": step})
    assert good.latest(str(tmp_path)) == f"{tmp_path}/step_10.pt"
    assert release("1.2.0").load(f"{tmp_path}/step_10.pt") == state
    assert v2.load(f"{tmp_path}/step_10.pt") == {"model": {"w": 1}, "step": 10}
    assert v21.latest(str(tmp_path)) == f"{tmp_path}/step_8.pt"
    v2.save(f"{tmp_path}/v2.pt", state)
    assert v2.load(f"{tmp_path}/v2.pt") == state
    assert sorted(os.listdir(tmp_path)) == ["step_10.pt", "step_8.pt", "v2.pt"], "no temporary file is left"
