"""The end of a multi-process run (``torchrun``, ``accelerate launch``): every process leaves the same way.

[`finish_distributed`] is called once by every process as the last step of a command that ran on several processes
(``elmo train-lm``, ``elmo train-tagger``, ``elmo embed``), after everything that needs the others:

1. a barrier, which every process reaches after all its collectives, in the same order (no process waits in a
   collective that another never enters, and none exits while another still writes the model, the card or the
   results);
2. the Trainer's ``DistributedDataParallel`` wrapper let go, and collected, while the process group is still
   registered, so that its reducer does not hold the group's last reference;
3. ``destroy_process_group()``, which then drops the last reference itself, and ends the group at once: its gloo
   threads joined, its connections closed.

Why the order matters (issue 36; docs/reliability.md, "A finished multi-process run exits"): ``destroy_process_group``
only unregisters a group that something else still holds, and DDP's C++ reducer does. The group then ended when the
Trainer was freed, e.g. when the command's function returned; the reducer's destructor runs with the GIL held, and
the group's destructor joins gloo's worker threads. A worker thread that was still releasing a finished collective
(a barrier keeps the earlier all-gathers, whose tensors are Python objects) needs the GIL to free those tensors:
each waited for the other, forever (a rank of a finished two-process run that never exited). Dropped from
``destroy_process_group``, the last reference goes through torch's Python wrapper, which releases the GIL first.

With ``ELMO_EXIT_STACK_DUMP_SECONDS=N`` in the environment, a process still alive N seconds after reaching this point
prints every thread's stack to stderr (``faulthandler``), so that a run that does not end shows where it waits.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import weakref

logger = logging.getLogger(__name__)

STACK_DUMP_VARIABLE = "ELMO_EXIT_STACK_DUMP_SECONDS"


def is_distributed() -> bool:
    """Whether this process is one of several in an initialized ``torch.distributed`` process group."""
    import torch

    return torch.distributed.is_available() and torch.distributed.is_initialized()


def any_process(flag: bool) -> bool:
    """``flag`` of this process, or of any process of the run: a decision that changes which collectives come next
    (stop training now) taken by all of them together. A collective itself: every process must call it at the same
    point. In a single process, ``flag``."""
    if not is_distributed():
        return flag
    import torch
    import torch.distributed as dist

    # NCCL reduces device tensors only; gloo (and the others) take CPU tensors.
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def finish_distributed(trainer=None, *, destroy: bool = True) -> None:
    """End a multi-process run on this process; call it on every process, once, after its last collective.

    ``trainer``: the run's ``transformers.Trainer``, whose data-parallel wrapper (and the accelerator's references
    to it, its optimizer and data loaders) is released first, so that destroying the process group ends it at once,
    without the GIL held (see the module's docstring).
    The trainer stays usable for what needs no other process (its ``model`` is the unwrapped model).
    ``destroy=False``: the barrier only, for a group this code did not create (its creator destroys it).
    Nothing happens in a single process (no process group).
    """
    if not is_distributed():
        return
    import torch.distributed as dist

    arm_exit_stack_dump()
    dist.barrier()
    if trainer is not None:
        release_wrapped_model(trainer)
    if destroy:
        dist.destroy_process_group()


def release_wrapped_model(trainer) -> None:
    """Drop a Trainer's references to its ``DistributedDataParallel`` wrapper (``model_wrapped`` and the
    accelerator's lists of prepared models, optimizers, schedulers and data loaders) and collect it; a warning if
    something else still holds it (its reducer would then hold the process group past ``destroy_process_group``)."""
    wrapper = None
    if trainer.model_wrapped is not None and trainer.model_wrapped is not trainer.model:
        with contextlib.suppress(TypeError):  # an object without weak references: no check
            wrapper = weakref.ref(trainer.model_wrapped)
    trainer.accelerator.free_memory()  # also runs the garbage collector
    trainer.model_wrapped = trainer.model
    gc.collect()
    if wrapper is not None and wrapper() is not None:
        logger.warning(
            "the data-parallel wrapper (%s) is still referenced at the end of the run: its process group ends only "
            "when it is freed",
            type(wrapper()).__name__,
        )


def arm_exit_stack_dump() -> None:
    """With ``ELMO_EXIT_STACK_DUMP_SECONDS=N`` set: dump every thread's stack to stderr if this process is still
    alive N seconds from now (it should have exited long before)."""
    seconds = os.environ.get(STACK_DUMP_VARIABLE)
    if not seconds:
        return
    try:
        seconds = float(seconds)
    except ValueError:
        logger.warning("%s=%r is not a number of seconds: ignored", STACK_DUMP_VARIABLE, seconds)
        return
    import faulthandler

    try:
        faulthandler.dump_traceback_later(seconds, exit=False, file=sys.__stderr__)
    except (ValueError, OSError, AttributeError) as error:  # no usable stderr (e.g. closed)
        logger.warning("%s: cannot arm the stack dump: %s", STACK_DUMP_VARIABLE, error)
