"""``precision="auto"`` (issue 30 item 4): the chooser's rule on given CPU features, this CPU's choice kept within
its documented error bound (the TF fixture and the tiny model, against float32), the kernels' own limits heeded,
``elmo embed --precision auto`` saying its choice, and contradictory precision flags refused."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import h5py
import pytest
import torch
from helpers import TINY

import elmo_cli as cli
from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.commands import common
from modeling_elmo.demo_models.model import demo_model_path
from modeling_elmo.inference.precision import (
    CPU_FLAGS,
    DOCUMENTED_MIN_COSINE,
    INT8_FULL_RANGE,
    ONEDNN_BF16,
    choose_precision,
    cpu_capabilities,
    load_for_inference,
)
from modeling_elmo.inference.quantize import Int8BiLstmLayer, needs_reduced_range

pytestmark = pytest.mark.usefixtures("one_thread")

AMX_XEON = {"amx_bf16", "avx512_bf16", "avx512_vnni", ONEDNN_BF16, INT8_FULL_RANGE}
ZEN4_EPYC = {"avx512_bf16", "avx512_vnni", ONEDNN_BF16, INT8_FULL_RANGE}
AVX2_EPYC: set[str] = set()


@pytest.mark.parametrize(
    ("capabilities", "expected"),
    [
        (AMX_XEON, "bfloat16"),  # bfloat16 2712 words/s, int8 1653, float32 995 (docs/speed.md, issue 30)
        (ZEN4_EPYC, "int8"),  # int8 938, bfloat16 771, float32 393
        (AVX2_EPYC, "float32"),  # bfloat16 7.7x slower; 7-bit int8 misses 0.995 on small models
        ({"avx_vnni", INT8_FULL_RANGE}, "int8"),  # a client CPU with AVX-VNNI
        ({"avx512_vnni"}, "float32"),  # the flag, but a kernel limited to 7-bit activations (FBGEMM on AVX2)
        (AMX_XEON - {ONEDNN_BF16}, "int8"),  # AMX listed, but oneDNN limited below it: no bfloat16 units used
        ({"avx512_bf16", ONEDNN_BF16}, "bfloat16"),  # bfloat16 units without VNNI
        ({"amx_bf16", "avx512_bf16"}, "float32"),  # flags without the kernels behind them
    ],
    ids=["amx", "zen4", "avx2", "avx-vnni", "vnni-flag-7bit-kernel", "amx-onednn-limited", "bf16-only", "no-kernels"],
)
def test_the_rule_on_given_cpu_features(capabilities, expected):
    choice = choose_precision("cpu", capabilities=capabilities)
    assert choice.name == expected and choice.reason


def test_other_devices_than_the_cpu():
    assert choose_precision("mps", capabilities=AMX_XEON).name == "float32"
    if torch.cuda.is_available():  # the GPU is asked, not the CPU's features
        expected = "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
        assert choose_precision("cuda", capabilities=AVX2_EPYC).name == expected


def test_this_cpus_features_are_its_flags_and_its_kernels_answers():
    found = cpu_capabilities()
    flags = set()
    if os.path.isfile("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split(":")[1].split())
    assert found & set(CPU_FLAGS) == flags & set(CPU_FLAGS)
    assert (ONEDNN_BF16 in found) == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert (INT8_FULL_RANGE in found) == (not needs_reduced_range())
    assert choose_precision("cpu") == choose_precision("cpu", capabilities=found)


_LIMITED = "from modeling_elmo.inference.precision import choose_precision; print(choose_precision('cpu').name)"


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_kernels_limited_to_avx2_choose_float32():
    """With oneDNN and FBGEMM limited to AVX2, the CPU's flags still list its units; the choice follows the
    kernels (there: no bfloat16 units, 7-bit int8 activations)."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", FBGEMM_ENABLE_INSTRUCTIONS="AVX2", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", _LIMITED], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "float32"


@pytest.mark.parametrize(
    ("capabilities", "expected", "says", "never_says"),
    [
        # A VNNI CPU whose int8 kernel is limited to 7-bit activations (FBGEMM on AVX2) does have VNNI (issue 36).
        (ZEN4_EPYC - {INT8_FULL_RANGE}, "bfloat16", "has VNNI, but its int8 kernel takes 7-bit", "without VNNI"),
        ({"avx512_bf16", ONEDNN_BF16}, "bfloat16", "without VNNI", "7-bit"),
        ({"avx512_vnni"}, "float32", "has VNNI, but its int8 kernel takes 7-bit", "no VNNI"),
        (AMX_XEON - {ONEDNN_BF16}, "int8", "has AMX, but oneDNN", "VNNI without AMX"),
        ({"amx_bf16", "avx512_bf16"}, "float32", "has bfloat16 units, but oneDNN does not use them", "no bfloat16"),
        (AVX2_EPYC, "float32", "no bfloat16 units; no VNNI", "but"),
    ],
    ids=["vnni-7bit-kernel", "bf16-only", "vnni-flag-7bit-kernel", "amx-onednn-limited", "no-kernels", "avx2"],
)
def test_the_reason_names_units_the_kernels_leave_unused(capabilities, expected, says, never_says):
    choice = choose_precision("cpu", capabilities=capabilities)
    assert choice.name == expected and says in choice.reason and never_says not in choice.reason, choice


_LIMITED_REASON = (
    "import json\n"
    "from modeling_elmo.inference.precision import choose_precision, cpu_capabilities\n"
    "caps = cpu_capabilities()\n"
    "print(json.dumps(sorted(caps)))\n"
    "print(choose_precision('cpu', capabilities=caps - {'amx_bf16'}).reason)\n"  # this CPU as if it had no AMX
)


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_fbgemm_limited_to_avx2_on_a_vnni_cpu_is_not_called_a_cpu_without_vnni():
    """Issue 36: under FBGEMM_ENABLE_INSTRUCTIONS=AVX2, a VNNI CPU without AMX got "AVX-512 BF16 without VNNI". The
    kernels here, limited by the variable: the reason names the limit, not a missing unit."""
    env = dict(os.environ, FBGEMM_ENABLE_INSTRUCTIONS="AVX2", OMP_NUM_THREADS="1")
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    done = subprocess.run([sys.executable, "-c", _LIMITED_REASON], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    caps_line, reason = done.stdout.strip().splitlines()[-2:]
    caps = set(json.loads(caps_line))
    if not caps & {"avx512_vnni", "avx_vnni"} or INT8_FULL_RANGE in caps:
        pytest.skip(f"needs a VNNI CPU whose int8 kernel FBGEMM_ENABLE_INSTRUCTIONS=AVX2 limits; this one has {caps}")
    assert "without VNNI" not in reason and "no VNNI" not in reason, reason
    assert "FBGEMM_ENABLE_INSTRUCTIONS=AVX2" in reason, reason


# ------------------------------------------------------------------------------ the choice's error, measured


def layers_of(model, sentences) -> list[torch.Tensor]:
    """Per layer, the word vectors ``(words, 2P)`` as float32."""
    batch = ElmoTokenizer()(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    mask = out.mask.bool()
    return [layer[mask].float() for layer in out.hidden_states]


def worst_cosine(model, reference_model, sentences) -> float:
    pairs = zip(layers_of(model, sentences), layers_of(reference_model, sentences), strict=True)
    return min(float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1).min()) for a, b in pairs)


def check_precision_reached(model, name: str) -> None:
    assert model.inference_precision == name
    if name == "int8":
        assert all(isinstance(layer, Int8BiLstmLayer) for layer in model.bilm.layers)
    else:
        assert model.dtype == getattr(torch, name)


def test_this_cpus_choice_keeps_its_documented_bound_on_the_fixture(converted_fixture, fixture_dir):
    with open(fixture_dir / "sentences.json", encoding="utf-8") as f:
        sentences = [line.split(" ") for batch in json.load(f) for line in batch]
    chosen = choose_precision("cpu").name
    model = load_for_inference(str(converted_fixture), precision="auto")
    check_precision_reached(model, chosen)
    reference = load_for_inference(str(converted_fixture), precision="float32")
    # float32 against itself: the same computation, so the same vectors.
    assert worst_cosine(model, reference, sentences) >= DOCUMENTED_MIN_COSINE[chosen] - (chosen == "float32") * 1e-6


@pytest.mark.parametrize("which", ["tiny", "demo"])
def test_this_cpus_choice_keeps_its_documented_bound_on_small_models(which, tmp_path):
    """The tiny random model of tests/test_reduced_precision.py, and the bundled demo biLM (trained)."""
    if which == "demo":
        folder = demo_model_path()
    else:
        torch.manual_seed(0)
        folder = str(tmp_path / "tiny")
        ElmoModel(ElmoConfig(**TINY)).save_pretrained(folder)
    sentences = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hi"], ["A", "longer", "one", ",", "with", "more"]]
    chosen = choose_precision("cpu").name
    model = load_for_inference(folder, precision="auto")
    check_precision_reached(model, chosen)
    reference = load_for_inference(folder, precision="float32")
    assert worst_cosine(model, reference, sentences) >= DOCUMENTED_MIN_COSINE[chosen] - (chosen == "float32") * 1e-6


def test_load_for_inference_refuses_what_it_cannot_do(tiny_dir):
    with pytest.raises(ValueError, match="precision must be auto or one of"):
        load_for_inference(str(tiny_dir), precision="float16")
    with pytest.raises(ValueError, match="not dtype="):
        load_for_inference(str(tiny_dir), precision="bfloat16", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="int8 runs on CPU only"):
        load_for_inference(str(tiny_dir), precision="int8", device="meta")
    for name in ("float32", "bfloat16", "int8"):  # each named precision reaches the model
        check_precision_reached(load_for_inference(str(tiny_dir), precision=name), name)
    assert isinstance(load_for_inference(str(tiny_dir), precision="float32"), ElmoModel)


# ----------------------------------------------------------------------------------------- the commands


def test_embed_precision_auto_says_its_choice(tiny_dir, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("The cat sat on the mat .\nHello world\n", encoding="utf-8")
    chosen = choose_precision("cpu").name
    out = tmp_path / "auto.hdf5"
    code = cli.main(["embed", str(text), "-o", str(out), "--model", str(tiny_dir), "--device", "cpu"]
                    + ["--disable_tqdm", "--precision", "auto"])  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err
    assert f"precision auto: {chosen}; " in err
    with h5py.File(out, "r") as f:
        assert f.attrs["precision"] == chosen

    out = tmp_path / "named.hdf5"
    code = cli.main(["embed", str(text), "-o", str(out), "--model", str(tiny_dir), "--device", "cpu"]
                    + ["--disable_tqdm", "--precision", "int8"])  # fmt: skip
    assert code == 0
    assert "precision auto" not in capsys.readouterr().err
    with h5py.File(out, "r") as f:
        assert f.attrs["precision"] == "int8"


def test_similar_precision_auto_says_its_choice(tiny_dir, capsys):
    chosen = choose_precision("cpu").name
    args = ["similar", "--model", str(tiny_dir), "--device", "cpu", "--precision", "auto", "--word", "bank"]
    code = cli.main([*args, "The bank is open .", "The river bank ."])
    assert code == 0
    assert f"precision auto: {chosen}; " in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [
        ["--precision", "auto", "--dtype", "bfloat16"],
        ["--precision", "int8", "--quantize", "int8"],
        ["--precision", "float32", "--dtype", "float32"],
    ],  # fmt: skip
    ids=["auto-dtype", "int8-quantize", "same-twice"],
)
def test_embed_refuses_two_precision_flags(tiny_dir, tmp_path, capsys, flags):
    text = tmp_path / "in.txt"
    text.write_text("Hello world\n", encoding="utf-8")
    out = tmp_path / "x.hdf5"
    code = cli.main(["embed", str(text), "-o", str(out), "--model", str(tiny_dir), *flags])
    assert code == 1
    err = capsys.readouterr().err
    assert f"error: --precision {flags[1]} and {flags[2]} {flags[3]} both set the precision" in err
    assert not out.exists()


def test_precision_int8_off_the_cpu_is_refused_by_its_own_name():
    """``--precision int8`` with a GPU device: the error names ``--precision`` (the flag given), not ``--quantize``.
    Called directly: without a GPU, ``--device cuda`` stops earlier, at ``resolve_device``."""
    args = argparse.Namespace(precision="int8", dtype=None, quantize=None)
    with pytest.raises(common.CliError, match=r"^--precision int8 runs on CPU only, not on cuda") as caught:
        common.resolve_precision(args, torch.device("cuda"))
    assert "--quantize" not in str(caught.value)
    cpu = argparse.Namespace(precision="int8", dtype=None, quantize=None)
    common.resolve_precision(cpu, torch.device("cpu"))
    assert (cpu.dtype, cpu.quantize) == ("float32", "int8")
