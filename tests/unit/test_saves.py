"""Save boundaries (`inject.saves`): what one save is, its step and its state, without a process group."""

import io

import pytest
import torch

from ckpt_harness.inject.saves import Saves, plain


def boundaries(tmp_path):
    began, ended = [], []
    return Saves(str(tmp_path), began.append, ended.append), began, ended



def test_nested_saves_are_one_save_whose_state_is_what_each_was_handed(tmp_path):
    saves, began, ended = boundaries(tmp_path)
    with saves.boundary(7, "framework"):  # a Trainer._save_checkpoint, say
        with saves.boundary(saves.step_in(tmp_path / "checkpoint-7" / "optimizer.pt"), "path", "optimizer.pt",
                            {"lr": 0.1}):
            pass
        with saves.boundary(None, "path", "model.safetensors", {"w": torch.ones(2)}):
            pass
    saves.flush()  # the script returns: a save lasts until it trains, saves another step or returns
    assert began == [7] and [(s.step, s.source) for s in ended] == [(7, "framework")]
    assert sorted(ended[0].state()) == ["model.safetensors", "optimizer.pt"]


def test_a_save_handed_the_whole_state_ignores_its_writers_inner_saves(tmp_path):
    saves, _, ended = boundaries(tmp_path)
    with saves.boundary(2, "path", "state_dict", {"w": torch.zeros(1)}):  # dcp.save
        with saves.boundary(None, "path", "BytesIO", torch.zeros(1)):
            pass
    saves.flush()
    assert list(ended[0].state()) == ["state_dict"]


def test_the_step_is_the_first_number_of_the_path_else_one_past_the_last(tmp_path):
    saves, _, ended = boundaries(tmp_path)
    assert saves.step_in(tmp_path / "global_step4" / "mp_rank_00_model_states.pt") == 4
    assert saves.step_in(tmp_path / "model.pt") is None
    assert saves.step_in("/elsewhere/step_9") is None  # not under the checkpoint directory
    with saves.boundary(4, "path"):
        pass
    with saves.boundary(None, "path"):
        pass
    saves.flush()
    assert [(s.step, s.source) for s in ended] == [(4, "path"), (5, "count")]


def test_a_save_that_raised_is_not_recorded(tmp_path):
    saves, began, ended = boundaries(tmp_path)
    try:
        with saves.boundary(2, "saving"):
            raise OSError("disk full")
    except OSError:
        pass
    assert began == [2] and ended == [] and saves.current is None


def test_plain_takes_modules_by_state_dict_and_names_other_objects_by_type():
    out = plain({"model": torch.nn.Linear(1, 1), "args": object(), "rng": (3, [1, 2], None)})
    assert sorted(out["model"]) == ["bias", "weight"]
    assert out["args"] == "<builtins.object>" and out["rng"] == [3, [1, 2], None]


class Scaler:
    """Stands for a framework object pickled whole (DeepSpeed's loss scaler)."""

    def __init__(self, scale):
        self.cur_scale, self.cur_iter = scale, 3


def test_plain_takes_the_listed_framework_objects_by_attributes_sets_sorted_enums_by_name(monkeypatch):
    import enum

    from ckpt_harness.inject import saves

    class Stage(enum.Enum):
        ONE = 1

    listed = {"scaler": Scaler(2.0), "other": Scaler(4.0), "names": {"b", "a"}, "stage": Stage.ONE}
    # not listed: named by type (its fields may differ per run)
    assert plain(listed)["scaler"] == f"<{__name__}.Scaler>"
    monkeypatch.setattr(saves, "BY_ATTRIBUTES", saves.BY_ATTRIBUTES | {f"{__name__}.Scaler"})
    out = plain(listed)
    assert out["scaler"] == {"type": f"{__name__}.Scaler", "cur_scale": 2.0, "cur_iter": 3}
    assert out["other"]["cur_scale"] == 4.0  # a different scale is a different state
    assert out["names"] == ["a", "b"] and out["stage"].endswith("Stage.ONE>")


def test_a_path_inside_the_checkpoint_directory_is_named_relative_to_it_and_no_other_string_is(tmp_path):
    """A checkpoint that records its own path (Lightning's `best_model_path`)
    would differ between two runs of one case, each in a directory of its own."""
    saves, _, ended = boundaries(tmp_path / "ckpt")
    with saves.boundary(2, "framework"):
        with saves.boundary(None, "path", "BytesIO", {
                "best": str(tmp_path / "ckpt" / "step_2.ckpt"), "dir": str(tmp_path / "ckpt"),
                "paths": [str(tmp_path / "ckpt" / "a" / "b")], "beside": str(tmp_path / "ckpt-old" / "x"),
                "outside": str(tmp_path / "x"), "relative": "step_2.ckpt", "word": "ckpt"}):
            pass
    saves.flush()
    named = ended[0].state(saves.where)["BytesIO"]
    assert named == {"best": "{ckpt_dir}/step_2.ckpt", "dir": "{ckpt_dir}", "paths": ["{ckpt_dir}/a/b"],
                     "beside": str(tmp_path / "ckpt-old" / "x"), "outside": str(tmp_path / "x"),
                     "relative": "step_2.ckpt", "word": "ckpt"}
    assert ended[0].state()["BytesIO"]["best"] == str(tmp_path / "ckpt" / "step_2.ckpt")  # by default as it was


def test_accelerates_save_state_is_named_by_its_directory_or_under_automatic_naming_by_its_iteration(
        tmp_path, monkeypatch):
    """`save_state(dir)` is the number in `dir`; `save_state()` under
    automatic checkpoint naming writes ``checkpoints/checkpoint_<iteration>``,
    so its iteration is its step (before, it was counted: 1, 2, ... whatever
    the script set). A real Accelerator, one process."""
    accelerate = pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState
    from accelerate.utils import ProjectConfiguration

    from ckpt_harness.inject import saves as module

    recorder, _, ended = boundaries(tmp_path)
    monkeypatch.setattr(module, "_active", recorder)
    monkeypatch.setattr(accelerate.Accelerator, "save_state", accelerate.Accelerator.save_state)  # undone after
    module._accelerate(accelerate.accelerator)
    try:
        project = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
        acc = accelerate.Accelerator(cpu=True, project_config=project)
        acc.prepare(torch.nn.Linear(2, 2))
        acc.project_configuration.iteration = 6
        acc.save_state()
        acc.save_state(tmp_path / "step_9")
    finally:
        AcceleratorState._reset_state(True)
    recorder.flush()
    assert (tmp_path / "checkpoints" / "checkpoint_6").is_dir()
    assert [(s.step, s.source) for s in ended] == [(6, "path"), (9, "path")]


def test_a_file_object_is_named_as_its_plain_io_type_whether_the_probes_opened_it_or_not(tmp_path):
    """A save's state names what `torch.save(obj, f)` was handed by f's type
    when f names no path: the probes' file classes must not leak into it, or
    a run with file tracing and one without (a case's resume) record other
    keys for the same state, and the resume reads as a different final state."""
    from ckpt_harness.inject.files import ProbedBufferedWriter
    from ckpt_harness.inject.saves import _type_name

    with open(tmp_path / "plain.pt", "wb") as plain:
        assert _type_name(plain) == "BufferedWriter"
    probed = io.BufferedWriter.__new__(ProbedBufferedWriter)  # its type is what matters, not an open file
    assert _type_name(probed) == "BufferedWriter"
    assert _type_name(io.BytesIO()) == "BytesIO" and _type_name(object()) == "object"


def test_a_save_to_the_buckets_url_is_inside_the_checkpoint_and_a_save_elsewhere_is_not(tmp_path):
    """On a bucket a script saves under `{ckpt_url}`: by URL (`dcp.save(checkpoint_id=...)`), or into a file
    fsspec opened there (`torch.save(obj, f)`); its step and file name are read from the key as from a path."""
    import fsspec

    saves = Saves(str(tmp_path), [].append, [].append, url="memory://ckpt/run")
    assert saves.rel("memory://ckpt/run/step_4/state.pt") == "step_4/state.pt"
    assert saves.step_in("memory://ckpt/run/global_step6") == 6
    assert saves.rel("memory://ckpt/other/step_4") is None and saves.rel("memory://elsewhere/run/x") is None
    fs, root = fsspec.url_to_fs("memory://ckpt/run")
    with fs.open(f"{root}/step_2/model.pt", "wb") as f:
        assert saves.rel(f) == "step_2/model.pt" and saves.step_in(f) == 2
    assert saves.where("memory://ckpt/run/step_2") == "{ckpt_dir}/step_2"  # a URL a checkpoint records of itself
    local = Saves(str(tmp_path), [].append, [].append)  # a local directory: a URL is not under it
    assert local.rel("memory://ckpt/run/step_4") is None
    with fsspec.open(str(tmp_path / "step_8.pt"), "wb") as f:  # fsspec's local file, by its path
        assert local.rel(f) == "step_8.pt" and local.step_in(f) == 8
