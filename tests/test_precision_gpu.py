"""Precision and GPU readiness (vlbias.runtime, docs/precision-gpu.md): ``precision: bf16`` runs the
forward passes under autocast and is recorded in provenance and the cache key; fp32, every default,
is IEEE float32 (TF32 off); the GPU check script's code paths on tiny models, CPU against CPU."""

import json

import numpy as np
import pytest
import torch
import yaml
from helpers import REPO, plain_module
from helpers.tiny import TINY_VL, VL_CAPTIONS, random_visual

from vlbias.errors import InputError
from vlbias.io.cache import fingerprint
from vlbias.io.store import read_provenance
from vlbias.models import build
from vlbias.regions import build as build_detector
from vlbias.runtime import runtime
from vlbias.schemas import adapters, with_defaults

CLIP = {"adapter": "open_clip", "arch": "ViT-B-32", "weights": "random", "seed": 0, "device": "cpu",
        "model_cfg": {"embed_dim": 16,
                      "vision_cfg": {"image_size": 32, "patch_size": 8, "width": 32, "layers": 2, "head_width": 16},
                      "text_cfg": {"width": 32, "heads": 2, "layers": 1}}}
REGIONS = [random_visual(5, i, persons=[0])[0] for i in range(3)]


def test_every_adapter_defaults_to_fp32_and_the_paper_tables_keep_it():
    for kind in ("models", "detectors"):
        for name in adapters(kind):
            assert with_defaults({"adapter": name}, kind)["precision"] == "fp32", (kind, name)
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "precision" in node:
                found.append(node["precision"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    assert set(found) <= {"fp32"}, "a paper-table entry computes in bf16"


def first_linear_dtypes(encoder, call):
    """(the dtypes the model's first Linear layer computed in during ``call()``, what ``call()`` returned)."""
    linear = next(m for m in encoder.model.modules() if isinstance(m, torch.nn.Linear))
    seen = []
    handle = linear.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    try:
        out = call()
    finally:
        handle.remove()
    return set(seen), out


@pytest.mark.parametrize("family", ["visualbert", "lxmert"])
def test_bf16_runs_the_forward_pass_under_autocast(family):
    fp32, bf16 = build(TINY_VL[family]), build({**TINY_VL[family], "precision": "bf16"})
    (dtypes32, a), (dtypes16, b) = (first_linear_dtypes(m, lambda m=m: m.embed(VL_CAPTIONS, REGIONS, "S"))
                                    for m in (fp32, bf16))
    assert (dtypes32, dtypes16) == ({torch.float32}, {torch.bfloat16})
    assert a.dtype == b.dtype == np.float32  # vectors come back float32 either way
    assert 0 < np.abs(a - b).max() < 0.05 * np.abs(a).max()  # bfloat16's rounding: changed, not broken
    # the masked-LM path runs under it too
    logp = bf16.mask_logprobs(["The [MASK] is a nurse."], [REGIONS[0]])
    assert logp[0].dtype == np.float32 and np.isfinite(logp[0]).all()


def test_bf16_image_and_text_encoders():
    fp32, bf16 = build(CLIP), build({**CLIP, "precision": "bf16"})
    pixels = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    a, b = fp32.encode_images(pixels), bf16.encode_images(pixels)
    assert a.dtype == b.dtype == np.float32 and 0 < np.abs(a - b).max() < 0.05 * np.abs(a).max()
    t = fp32.encode_texts(["a rose", "a wasp"]), bf16.encode_texts(["a rose", "a wasp"])
    assert 0 < np.abs(t[0] - t[1]).max() < 0.05 * np.abs(t[0]).max()


def test_precision_is_in_the_provenance_and_the_cache_key(tmp_path):
    from vlbias.images.store import build_image_store
    from vlbias.suites.grounded.jobs import cache_fingerprint
    from vlbias.suites.ieat import embed_image_store

    fp32, bf16 = build(CLIP), build({**CLIP, "precision": "bf16"})
    assert (fp32.info["precision"], bf16.info["precision"]) == ("fp32", "bf16")
    assert fingerprint(fp32.info) != fingerprint(bf16.info)  # the embedding cache's folder
    vl32, vl16 = build(TINY_VL["visualbert"]), build({**TINY_VL["visualbert"], "precision": "bf16"})
    assert vl16.info["precision"] == "bf16" and cache_fingerprint(vl32) != cache_fingerprint(vl16)
    from PIL import Image

    (tmp_path / "toy").mkdir()
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / "toy/a.png")
    build_image_store([{"category": "toy", "file": "a.png", "path": tmp_path / "toy/a.png"}], tmp_path / "s.h5", 32,
                      crop="top-left", resample="area")
    embed_image_store(tmp_path / "s.h5", bf16, tmp_path / "e.h5", {})
    assert read_provenance(tmp_path / "e.h5")["precision"] == "bf16"


def test_bad_precisions_are_refused():
    with pytest.raises(InputError, match="precision 'fp16'"):
        build({**CLIP, "precision": "fp16"})
    # a detector's boxes pass thresholds: bf16 would change which regions every model reads
    tiny = {"adapter": "torchvision", "weights": "random", "seed": 0, "min_boxes": 3, "max_boxes": 8, "conf": 0.2,
            "min_size": 64, "max_size": 128, "device": "cpu"}
    with pytest.raises(InputError, match="precision 'bf16': must be fp32 here"):
        build_detector({**tiny, "precision": "bf16"})
    schema = yaml.safe_load((REPO / "src/vlbias/schemas/detectors/_detector.yaml").read_text())
    assert schema["properties"]["precision"]["enum"] == ["fp32"]


def test_the_runtime_makes_float32_ieee(monkeypatch):
    # what a library or a notebook may have set before: TF32 on CUDA, bfloat16 passes for oneDNN's float32
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("medium")
    try:
        runtime(with_defaults({"adapter": "open_clip", "device": "cpu"}, "models"))
        assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.backends.cudnn.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")


def gpu_check():
    return plain_module("gpu_check", REPO / "benchmarks/gpu_check.py")


def test_gpu_check_tiny_on_the_cpu(tmp_path, capsys):
    # the script's code paths: a grounded family, a dual encoder and a detector, CPU against CPU
    status = gpu_check().main(["--out", str(tmp_path), "--device", "cpu", "--tiny", "--n", "4", "--seconds", "0",
                               "--only", "visualbert,open_clip,torchvision"])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    rows = {row["adapter"]: row for row in report["rows"]}
    assert status == 0 and set(rows) == {"visualbert", "open_clip", "torchvision"}
    for row in rows.values():
        assert row["cpu_vs_device"]["ok"] and row["cpu_vs_device"]["max_abs"] == 0  # the same kernels
        assert row["fp32"]["items_per_s"] > 0
    assert rows["visualbert"]["bf16"]["max_abs"] > 0 and "bf16" not in rows["torchvision"]
    hours = report["projected_hours"]["visualbert"]
    assert hours["fp32"] == pytest.approx(225_496 / rows["visualbert"]["fp32"]["items_per_s"] / 3600)
    assert "Projected" in (tmp_path / "gpu_check.txt").read_text()


def test_gpu_check_on_the_google_plan_tiny_on_the_cpu(tmp_path):
    # --plan: one family on the plan's own calls (one Google test's), the study projected from its rate
    assert gpu_check().main(["--out", str(tmp_path), "--device", "cpu", "--tiny", "--plan", "--only", "lxmert",
                             "--stimuli", "1", "--calls", "2", "--batch-size", "8"]) == 0
    report = json.loads((tmp_path / "gpu_check_plan.json").read_text())
    (row,) = report["rows"]
    assert row["calls_run"] == 2 and 8 < row["pairs_run"] <= 16 and row["device_busy_s"] is None
    assert row["plan_pairs"] == pytest.approx(row["fill"] * 8 * row["plan_calls"]) and 0.5 < row["fill"] <= 1
    assert row["pairs_per_s"] == pytest.approx(row["pairs_run"] / row["seconds"])
    assert row["host_ms_per_pair"] == pytest.approx(1000 * (row["seconds"] - row["model_s"]) / row["pairs_run"])
    assert 0 < row["model_s"] < row["seconds"]
    assert report["projected_hours"]["families"] == pytest.approx(row["plan_pairs"] / row["pairs_per_s"] / 3600)
    assert "CPU projections" in (tmp_path / "gpu_check_plan.txt").read_text()


def test_gpu_check_compare_fails_beyond_its_tolerance():
    check = gpu_check()
    a = np.random.default_rng(0).standard_normal((4, 8))
    assert check.compare(a, a + 1e-6)["ok"]
    assert not check.compare(a, a + 1e-2)["ok"]
    b = a.copy()
    b[0] = -b[0]
    assert not check.compare(a, b)["ok"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what the script says on a machine without CUDA")
def test_gpu_check_without_cuda_says_so(tmp_path, capsys):
    assert gpu_check().main(["--out", str(tmp_path)]) == 0
    assert "no CUDA" in capsys.readouterr().out
    assert json.loads((tmp_path / "gpu_check.json").read_text())["cuda"] is False
