"""The end of a multi-process run really ends its process group (issue 36, point 2; docs/reliability.md).

In one process (a gloo group of size 1): an object that holds the process group (``DistributedDataParallel`` does,
as ``process_group`` and in its reducer) keeps gloo's threads and connections alive after ``destroy_process_group``,
until the object is freed (in a real run: whenever the garbage collector frees the Trainer, possibly inside the
interpreter's shutdown). ``finish_distributed`` lets the Trainer's wrapper go first: when it returns, the group's
threads are gone. The two-process runs themselves are
``test_pretraining.py``'s and ``test_tagging.py``'s; ``scripts/check_two_process_exit.py`` repeats them under load.
"""

from __future__ import annotations

import os
import socket
import sys
from types import SimpleNamespace

import pytest
import torch

# Imported before any group exists: importing transformers.modeling_utils while a group exists keeps a reference to
# it (the group then outlives destroy_process_group in this process; the commands create theirs after the imports).
from modeling_elmo.training import distributed
from modeling_elmo.training.distributed import any_process, finish_distributed

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not torch.distributed.is_available(),
    reason="reads thread names from /proc (Linux), needs torch.distributed",
)


def _gloo_threads() -> list[str]:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # a thread that ended meanwhile
            pass
    return [name for name in names if "gloo" in name]


@pytest.fixture
def gloo_group(monkeypatch):
    """A gloo process group of one process, on loopback; destroyed afterwards if the test left it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    torch.distributed.barrier()  # gloo starts its work threads at the first collective
    assert _gloo_threads(), "gloo names its threads on Linux (gloo_tcp_loop, pt_gloo_runloop): none found"
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


class _Wrapper:
    """Stands in for ``DistributedDataParallel``, which holds its group as ``process_group``."""

    def __init__(self, group):
        self.process_group = group


def _trainer_holding_the_group(released: list) -> SimpleNamespace:
    """What ``finish_distributed`` uses of a Trainer: its data-parallel wrapper, which holds the process group
    (``DistributedDataParallel.process_group``, and its reducer in C++), the model, and the accelerator, whose list
    of prepared models holds the wrapper too."""
    wrapper = _Wrapper(torch.distributed.distributed_c10d._get_default_group())
    prepared = [wrapper]  # as Accelerator._models
    accelerator = SimpleNamespace(free_memory=lambda: (prepared.clear(), released.append(True)))
    return SimpleNamespace(model=torch.nn.Linear(3, 2), model_wrapped=wrapper, accelerator=accelerator)


def test_destroying_the_group_alone_leaves_its_threads_while_an_object_holds_it(gloo_group):
    """Why the wrapper must go first: ``destroy_process_group`` unregisters the group; it ends (threads joined,
    connections closed) only when the last object holding it goes."""
    trainer = _trainer_holding_the_group([])
    torch.distributed.destroy_process_group()
    assert _gloo_threads(), "destroy_process_group ended the group although an object still holds it"
    trainer.model_wrapped = None
    trainer.accelerator.free_memory()
    assert not _gloo_threads()


def test_finish_distributed_ends_the_group_on_return(gloo_group):
    released = []
    trainer = _trainer_holding_the_group(released)
    finish_distributed(trainer)
    assert not torch.distributed.is_initialized()
    assert not _gloo_threads()
    assert released == [True] and trainer.model_wrapped is trainer.model
    finish_distributed(trainer)  # no group: nothing happens


def test_a_wrapper_still_held_elsewhere_is_reported(gloo_group, caplog):
    trainer = _trainer_holding_the_group([])
    kept = trainer.model_wrapped  # e.g. a callback that kept it
    with caplog.at_level("WARNING", logger="modeling_elmo.training.distributed"):
        finish_distributed(trainer)
    assert "still referenced" in caplog.text and "_Wrapper" in caplog.text
    assert _gloo_threads(), "the group ends only with the wrapper"
    del kept
    assert not _gloo_threads()


def test_any_process_and_finish_without_a_group():
    assert any_process(True) is True and any_process(False) is False
    finish_distributed()  # one process, no group: nothing to do


def test_any_process_is_an_all_reduce(gloo_group):
    assert any_process(True) is True and any_process(False) is False


def test_exit_stack_dump_is_armed_from_the_environment(monkeypatch):
    import faulthandler

    calls = []
    monkeypatch.setattr(faulthandler, "dump_traceback_later", lambda *a, **k: calls.append((a, k)))
    monkeypatch.delenv(distributed.STACK_DUMP_VARIABLE, raising=False)
    distributed.arm_exit_stack_dump()
    assert calls == []
    monkeypatch.setenv(distributed.STACK_DUMP_VARIABLE, "20")
    distributed.arm_exit_stack_dump()
    assert calls[0][0] == (20.0,) and calls[0][1]["exit"] is False
    monkeypatch.setenv(distributed.STACK_DUMP_VARIABLE, "soon")
    distributed.arm_exit_stack_dump()  # not a number: a warning, no dump
    assert len(calls) == 1
