"""Small helpers shared by the safety tests (plain functions and classes; fixtures live in conftest.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

# The tiny biLM most tests use: the original's structure (filters, highway, 2 residual layers) at toy sizes.
TINY_SIZES = dict(
    char_embedding_dim=4,
    char_cnn_filters=[[1, 4], [2, 8], [3, 8]],
    n_highway=1,
    lstm_dim=16,
    projection_dim=8,
    n_layers=2,
)
# The same with clipping and large initial weights, so that the clips and the cell state really act.
TINY = dict(TINY_SIZES, cell_clip=3.0, proj_clip=3.0, initializer_range=0.3)


def random_bilstm_layer(dtype, clips: bool, residual: bool = False):
    """A tiny ``ElmoBiLstmLayer`` with weights drawn from N(0, 0.5) (seed 0), in ``dtype``; ``clips``: a cell clip of 1
    and a projection clip of 0.5, which bind (some cell states and outputs pass them unclipped)."""
    import torch

    from modeling_elmo import ElmoConfig
    from modeling_elmo.modeling_elmo import ElmoBiLstmLayer

    torch.manual_seed(0)
    config = ElmoConfig(**{**TINY, "cell_clip": 1.0 if clips else None, "proj_clip": 0.5 if clips else None})
    layer = ElmoBiLstmLayer(config, residual=residual)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_(0, 0.5)
    return layer.to(dtype)


# Tolerances come from the float32 error measured on the computation each checks: AMD EPYC Zen 4 with the default
# kernels (AVX-512), AVX2 kernels (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2), unvectorised ATen, 1 and 2
# threads; and an AMX Xeon (issue 29).
#
# The same float32 weights through another batching, padding, block size or code path (the fused LSTM vs the
# step-by-step reference, prepacked products, the character CNN shortcut, the token cache, a reloaded copy): GEMMs
# blocked differently round differently. Measured at most 1.1e-6 on the tiny models and 7.2e-7 on the AMX Xeon;
# 1e-5 is the batch-invariance bound the docs state. A real bug (a wrong mask, a state leaking between rows, a
# dropped clip) moves outputs by 1e-3 or more.
BATCHING_ATOL = 1e-5


def run_two_processes(args: list[str], cwd: str | os.PathLike, env: dict | None = None, timeout: float = 240):
    """``torch.distributed.run --standalone --nproc_per_node 2 *args``: the finished process, or a test failure
    that shows the output so far when it runs past ``timeout`` seconds.

    Gloo is bound to the loopback interface (``GLOO_SOCKET_IFNAME=lo``): by default it listens on the address the
    host name resolves to, which on some machines is not reachable from the host itself, and a rank then waits for
    its peer until the collective's timeout. On timeout the launcher is asked to stop (SIGTERM), which stops its
    ranks: ``subprocess.run`` would kill the launcher only, and leave the ranks running and holding its output."""
    env = {**(os.environ if env is None else env), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["GLOO_SOCKET_IFNAME"] = "lo"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # the launcher stops its ranks (each in a session of its own) first
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        raise AssertionError(
            f"2 processes ran past {timeout} s: {' '.join(args[:3])} ...\nstdout:\n{stdout[-2000:]}\n"
            f"stderr:\n{stderr[-4000:]}"
        ) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def copy_of(saved: Path, tmp_path: Path, name: str = "copy") -> Path:
    """A copy of the folder ``saved`` to damage in a test, as ``tmp_path/name``."""
    folder = tmp_path / name
    shutil.copytree(saved, folder)
    return folder


class PickleBomb:
    """Unpickling this runs code: it creates the file named in the argument (so a test sees whether it ran)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))
