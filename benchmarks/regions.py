"""Benchmark: the region stage (decode, prepare/resize, detector, HDF5 write) against the model alone.

On the same generated JPEGs (default 640x480), at the same batch size, in one run:
1. images/s of the whole stage (vlbias.regions.extract.extract_regions on 2N images) and of the
   model alone (detector.detect on the same images, prepared beforehand), and the fraction of the
   stage's time spent outside the model;
2. peak memory (ru_maxrss of a fresh process) of the stage on N and on 2N images: the pipeline
   keeps a bounded number of images in flight and streams regions to disk, so it should not grow.
Each measurement runs in its own subprocess, so one's peak memory does not hide the other's.

    python benchmarks/regions.py [--images 8] [--batch-size 2] [--detector torchvision] [--device cpu]
                                 [--repeats 1]
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

SPECS = {
    # random weights: the speed is that of the real model; min/max_size are torchvision's defaults
    "torchvision": {"adapter": "torchvision", "arch": "fasterrcnn_resnet50_fpn", "weights": "random",
                    "min_boxes": 10, "max_boxes": 100, "conf": 0.2},
}


def make_images(folder, n, width, height):
    """n photo-like JPEGs: smooth colour fields with shapes and noise (so JPEG sizes are realistic)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    paths = []
    for i in range(n):
        base = np.stack([np.sin(x * rng.uniform(2, 9) + rng.uniform(0, 6)) for _ in range(3)], -1) * 80 + 128
        for _ in range(6):
            cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.2)
            base[(x - cx * width / max(width, height)) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
        pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        path = Path(folder, f"img{i:04d}.jpg")
        Image.fromarray(pixels).save(path, quality=90)
        paths.append(path)
    return paths


def child(args):
    """One fresh process: build, warm up, run the stage on the first ``--n`` images; optionally time
    the model alone on them afterwards. Prints one JSON line."""
    from vlbias.images.decode import load_rgb
    from vlbias.regions import build
    from vlbias.regions.extract import extract_regions

    spec = SPECS.get(args.detector, {"adapter": args.detector}) | json.loads(args.spec) | {
        "device": args.device, "threads": args.threads}
    detector = build(spec)
    paths = sorted(Path(args.folder).glob("*.jpg"))[: args.n]
    detector.detect([detector.prepare(load_rgb(paths[0]))] * args.batch_size)  # warm-up (allocator, kernels)
    warm_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    entries = [(p.name, str(p)) for p in paths]
    summary = extract_regions(entries, detector, Path(args.folder, f"regions{args.n}.h5"), args.batch_size,
                              workers=args.threads)
    out = {"n": args.n, "stage_s": summary["seconds"], "in_detect_s": summary["detect_seconds"],
           "n_regions": summary["n_regions"],
           "warm_rss_mb": warm_rss, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if args.model_alone:
        prepared = [detector.prepare(load_rgb(p)) for p in paths]
        out["model_s"] = []
        for repeat in range(args.repeats):
            if repeat:  # alternate with the stage, so both see the same machine load; the fastest counts
                s = extract_regions(entries, detector, Path(args.folder, f"regions{args.n}.h5"), args.batch_size,
                                    workers=args.threads)
                out["stage_s"], out["in_detect_s"] = min((out["stage_s"], out["in_detect_s"]),
                                                         (s["seconds"], s["detect_seconds"]))
            t = time.perf_counter()
            for start in range(0, len(prepared), args.batch_size):
                detector.detect(prepared[start:start + args.batch_size])
            out["model_s"].append(time.perf_counter() - t)
        out["model_s"] = min(out["model_s"])
    print(json.dumps(out))


def run_child(args, folder, n, model_alone):
    cmd = [sys.executable, __file__, "--child", "--folder", str(folder), "--n", str(n), "--detector", args.detector,
           "--spec", args.spec, "--device", args.device, "--threads", str(args.threads),
           "--batch-size", str(args.batch_size), "--repeats", str(args.repeats)]
    if model_alone:
        cmd.append("--model-alone")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"benchmark child failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=8, help="N: memory is compared on N and 2N images; the "
                    "speeds are measured on the 2N")
    ap.add_argument("--repeats", type=int, default=1, help="alternate stage and model-alone runs this many "
                    "times, keep the fastest of each (for a busy machine)")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--detector", default="torchvision", help="an adapter name (random weights for torchvision)")
    ap.add_argument("--spec", default="{}", help="JSON merged into the detector's config entry")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2, help="torch threads, and as many decode threads")
    ap.add_argument("--size", default="640x480", help="WIDTHxHEIGHT of the generated JPEGs")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--model-alone", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    width, height = map(int, args.size.split("x"))
    with tempfile.TemporaryDirectory() as folder:
        make_images(folder, 2 * args.images, width, height)
        small = run_child(args, folder, args.images, model_alone=False)
        big = run_child(args, folder, 2 * args.images, model_alone=True)

    n = big["n"]
    outside = 1 - big["model_s"] / big["stage_s"]
    print(f"region stage, {args.detector} on {args.device} ({args.threads} threads), batch {args.batch_size}, "
          f"{n} JPEGs {width}x{height}:")
    print(f"  whole stage (decode, prepare/resize, model, write): {n / big['stage_s']:.2f} images/s "
          f"({big['stage_s']:.1f} s, {big['n_regions']} regions)")
    print(f"  model alone (detect on prepared inputs):            {n / big['model_s']:.2f} images/s "
          f"({big['model_s']:.1f} s)")
    noise = " (below zero: the runs' noise exceeds the pipeline's cost; try --repeats 3)" if outside < 0 else ""
    print(f"  time outside the model: {outside:.1%} of the stage (must be at most 33%){noise}; within the stage "
          f"run itself, {1 - big['in_detect_s'] / big['stage_s']:.1%} of its time was outside detector.detect")
    print(f"  peak memory: {small['peak_rss_mb']:.0f} MiB on {small['n']} images, {big['peak_rss_mb']:.0f} MiB on "
          f"{n} images ({big['peak_rss_mb'] - small['peak_rss_mb']:+.0f} MiB); after loading the model and one "
          f"batch: {small['warm_rss_mb']:.0f} and {big['warm_rss_mb']:.0f} MiB")


if __name__ == "__main__":
    main()
