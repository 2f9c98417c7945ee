"""Warm-ups step aside (`launch.preimport`, issue 64): a module the harness
chose to pre-import that is missing or raises is skipped with a note, once,
and the rest are still imported. Real module files on the real path."""

import sys

import pytest

from ckpt_harness.launch import preimport


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Names unique to this test: one missing, one whose import raises (and
    counts its tries), one that imports."""
    tag = tmp_path.name.replace("-", "_")
    names = {k: f"ckpt_preimport_{k}_{tag}" for k in ("absent", "raises", "fine")}
    tries = tmp_path / "tries"
    (tmp_path / f"{names['raises']}.py").write_text(
        f"open({str(tries)!r}, 'a').write('x')\nraise RuntimeError('refuses this environment')\n")
    (tmp_path / f"{names['fine']}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield names, tries
    for name in names.values():
        sys.modules.pop(name, None)


def test_what_cannot_be_imported_is_skipped_with_a_note_and_the_rest_still_is(modules, capsys):
    names, tries = modules
    preimport.pending()  # start from no queued notes
    assert preimport.preimport([names["absent"], names["raises"], names["fine"]]) == [names["absent"],
                                                                                    names["raises"]]
    assert sys.modules[names["fine"]].VALUE == 1  # what exists is pre-imported, as before
    err = capsys.readouterr().err
    assert (f"ckpt-harness: warm-up skipped: pre-importing {names['absent']} (ModuleNotFoundError: "
            f"No module named '{names['absent']}'); the ranks do without it, as a cold start would") in err
    assert f"pre-importing {names['raises']} (RuntimeError: refuses this environment)" in err
    # queued for the harness once (a server sends them with its reply), and never tried again here
    assert len(preimport.pending()) == 2 and preimport.pending() == []
    assert preimport.preimport([names["raises"]]) == [names["raises"]]
    assert tries.read_text() == "x" and capsys.readouterr().err == ""


def test_the_harness_says_a_servers_notes_once(capsys):
    preimport.tell({"op": "spawned", "notes": ["warm-up skipped: a note from a server"]})
    preimport.tell({"op": "spawned", "notes": ["warm-up skipped: a note from a server"]})
    preimport.tell({"op": "spawned"})
    preimport.tell(None)
    assert capsys.readouterr().err == "ckpt-harness: warm-up skipped: a note from a server\n"


def test_a_step_that_raises_is_skipped_and_an_interrupt_is_not():
    def refuse():
        raise OSError("no such op on this release")

    assert preimport.attempt("loading a planted op", refuse) is False
    assert preimport.attempt("a step that works", lambda: None) is True
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # Ctrl-C is the harness's to handle, never a skipped step
        preimport.attempt("a step cut by Ctrl-C", interrupted)
