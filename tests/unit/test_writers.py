"""The hold of a save's writers (`inject.writers`, `Stop.SLOW_WRITER`): what
lets each held writer go. Real threads and futures; a writer here is a
thread that calls `starting` and `finished` as the probes' wrapper does."""

import threading
from concurrent.futures import Future

import pytest

from ckpt_harness.inject.writers import Writers

SAVE = 4


def writer(table: Writers, ticket: int, name: str, ran: list, before=None, after=None) -> threading.Thread:
    """A writer of save SAVE: held at its start, then waits for `before`, notes its name, sets `after`."""
    def run():
        table.starting(SAVE, ticket)
        if before is not None:
            before.result(timeout=30)
        ran.append(name)
        if after is not None:
            after.set_result(name)
        table.finished(SAVE, False)
    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def quiet(ran: list, expected: list, seconds: float = 0.3) -> None:
    """Nothing more ran for a while: what is held stays held."""
    threading.Event().wait(seconds)
    assert ran == expected, ran


def test_a_held_writer_the_process_waits_for_goes_first_and_the_next_one_waits_for_training():
    """CPU staging: the process waits for the staging before its next
    optimizer step. The staging (handed over first) is let go; the upload
    of the staged copy stays held until training goes on."""
    table, ran, staged = Writers(), [], Future()
    table.hold(SAVE)
    threads = [writer(table, table.handed(SAVE), "stage", ran, after=staged),
               writer(table, table.handed(SAVE), "upload", ran, before=staged)]
    quiet(ran, [])  # nobody waits for them: both held
    assert staged.result(timeout=5) == "stage"  # the process waits for the staging: it goes
    quiet(ran, ["stage"])  # the process no longer waits: the upload stays held
    table.release("training")
    for thread in threads:
        thread.join(timeout=5)
    assert ran == ["stage", "upload"] and table.released_by == "training"


def test_a_writer_let_go_that_waits_for_one_still_held_lets_the_next_one_go():
    """The first writer in line waits for a later one (an upload waiting on
    its staging): once both the process and it wait, the next one goes."""
    table, ran, staged, uploaded = Writers(), [], Future(), Future()
    table.hold(SAVE)
    threads = [writer(table, table.handed(SAVE), "upload", ran, before=staged, after=uploaded),
               writer(table, table.handed(SAVE), "stage", ran, after=staged)]
    quiet(ran, [])
    assert uploaded.result(timeout=5) == "upload"
    for thread in threads:
        thread.join(timeout=5)
    assert ran == ["stage", "upload"] and table.released_by == "waited"


def test_the_line_is_the_order_of_the_hand_over_not_of_the_threads_start():
    """The staging is handed over first, the upload after it; the upload's
    thread reaches its start first. While the staging's has not started,
    nothing is let go: the upload waits for the staging anyway, and let go
    first it would start before training went on for no reason."""
    table, ran, staged, uploaded = Writers(), [], Future(), Future()
    table.hold(SAVE)
    stage_ticket, upload_ticket = table.handed(SAVE), table.handed(SAVE)
    upload = writer(table, upload_ticket, "upload", ran, before=staged, after=uploaded)
    with pytest.raises(TimeoutError):  # the process waits for the upload; the staging's thread has not started
        uploaded.result(timeout=0.5)
    assert not table._solo and ran == []  # nothing let go: the first in line has not started
    stage = writer(table, stage_ticket, "stage", ran, after=staged)
    assert uploaded.result(timeout=10) == "upload"
    for thread in (stage, upload):
        thread.join(timeout=10)
    assert ran == ["stage", "upload"] and table.released_by == "waited"


def test_a_process_that_waits_on_nothing_of_its_writers_keeps_them_held():
    """A wait on an event (a data loader's queue, say) is no wait for a
    writer: the held writer stays held until training or the stop."""
    table, ran = Writers(), []
    table.hold(SAVE)
    thread = writer(table, table.handed(SAVE), "write", ran)
    threading.Event().wait(0.5)  # the process waits, on something else
    assert ran == []
    table.release("stop")
    thread.join(timeout=5)
    assert ran == ["write"] and table.released_by == "stop"


def test_a_writer_that_looks_late_at_a_process_that_trained_and_then_waits_for_it_says_training(monkeypatch):
    """A loaded machine: the held writer's wait for the gate times out, and
    its thread is descheduled before it looks at the process. Meanwhile the
    process trains (the gate opens), stops and waits for the save. What the
    writer then sees, the process waiting for it, came after training went
    on: it was let go by training (seen in the suite as "waited")."""
    table, ran, landed, trained = Writers(), [], Future(), threading.Event()
    table.hold(SAVE)
    ticket = table.handed(SAVE)
    look = table._waited_for

    def late(ticket: int) -> bool:  # the writer's thread, descheduled between its two looks
        trained.wait(timeout=5)
        threading.Event().wait(0.2)  # the process is in its wait for the save by now
        return look(ticket)

    monkeypatch.setattr(table, "_waited_for", late)
    thread = writer(table, ticket, "write", ran, after=landed)
    threading.Event().wait(0.2)  # the writer's first wait for the gate timed out: it is in `late`
    table.release("training")
    trained.set()
    assert landed.result(timeout=10) == "write"  # the process waits for its save
    thread.join(timeout=5)
    assert table.released_by == "training"


@pytest.mark.parametrize("enabled", [True, False])
def test_the_frames_are_read_with_the_collector_off_and_its_state_given_back(enabled, monkeypatch):
    """python/cpython#106883: a collection started inside `sys._current_frames()` deadlocks the process
    on 3.11 (seen here: this module's writer frozen for good holding the GIL). The look at other threads'
    frames runs with the collector off, and gives back whatever state it found."""
    import gc
    import sys

    from ckpt_harness.inject import writers

    seen = []
    real = sys._current_frames
    monkeypatch.setattr(sys, "_current_frames", lambda: seen.append(gc.isenabled()) or real())
    (gc.enable if enabled else gc.disable)()
    try:
        frames = writers._current_frames()
        assert threading.get_ident() in frames and seen == [False] and gc.isenabled() is enabled
    finally:
        gc.enable()
