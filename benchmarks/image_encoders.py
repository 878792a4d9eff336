"""Benchmark: images/s of the iEAT image encoders, the model alone against the whole stage, in one run.

For each encoder (random weights: the speed is the real model's), at batch 1 and batch 32:
- model:   the network's forward pass alone on inputs prepared beforehand (iGPT: token contexts;
           SimCLRv2, CLIP: float tensors);
- stage:   from JPEG files on disk, what the workflow's two jobs run (workflow/scripts/ieat_images.py,
           embed_images.py): the image store (decode, square crop, resize;
           ``vlbias.images.store.build_image_store``) then the embedding store
           (``vlbias.suites.ieat.embed_image_store``: quantisation or normalisation, model, writes to
           an empty record cache, as a first run, and the HDF5 store); not the process start and the
           model's loading, which a job pays once.
Images are generated 640x480 JPEGs (benchmarks/regions.py), as many as the batch (at least 4);
each figure is the best of ``--repeats`` runs, after a one-image warm-up. A negative share outside
the model means the machine's load changed between the two measurements: noise, not a result.

    python benchmarks/image_encoders.py [--encoders igpt-s igpt-s-layer-and-logits simclr-r152-3x-sk1
                                                    simclr-r50-1x-sk1 clip-vit-b-32]
                                        [--batches 1 32] [--device cpu] [--threads 2] [--repeats 1]
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).parent))
from regions import make_images  # noqa: E402  (the benchmarks share their image generator)

ENCODERS = {
    # iGPT-S (openai/imagegpt-small's configuration), layer 20 of 24, 32x32 tokens; store at 32, area
    "igpt-s": ({"adapter": "igpt", "weights": "random", "clusters": "random", "layer": 20,
                "config": {"n_embd": 512, "n_layer": 24, "n_head": 8}}, 32, "area"),
    # the same with the next-pixel logits from the same pass (layer 20 and the logits, as the paper's
    # Tables 1 and 3 read iGPT-L): the cost of both outputs against one
    "igpt-s-layer-and-logits": ({"adapter": "igpt", "weights": "random", "clusters": "random", "layer": 20,
                                 "output": ["hidden", "logits"], "config": {"n_embd": 512, "n_layer": 24, "n_head": 8}},
                                32, "area"),
    # the paper's SimCLRv2 (r152_3x_sk1, 795M parameters) at 224; store at 224, area
    "simclr-r152-3x-sk1": ({"adapter": "simclr", "depth": 152, "width": 3, "sk": 1, "weights": "random"},
                           224, "area"),
    # the smallest SimCLRv2 (r50_1x_sk1): the paper's r152_3x_sk1 is ~13x its work per image
    "simclr-r50-1x-sk1": ({"adapter": "simclr", "depth": 50, "width": 1, "sk": 1, "weights": "random"}, 224, "area"),
    # an open_clip ViT-B/32 (both towers built; the image tower runs); store at 224, bicubic
    "clip-vit-b-32": ({"adapter": "open_clip", "arch": "ViT-B-32", "weights": "random"}, 224, "bicubic"),
}


def model_alone(encoder, pixels):
    """A callable running only the network on inputs prepared from ``pixels``."""
    import torch

    if encoder.info["adapter"] == "igpt":
        tokens = torch.from_numpy(encoder.tokens(pixels))
        context = torch.cat([torch.full_like(tokens[:, :1], encoder.model.config.vocab_size - 1), tokens[:, :-1]], 1)
        return lambda: encoder._forward(context)
    if encoder.info["adapter"] == "simclr":
        x = torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255
        return lambda: encoder.model(x)
    x = encoder.preprocess(torch.from_numpy(pixels))
    return lambda: encoder.model.encode_image(x)


def timed(fn, repeats=1):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=list(ENCODERS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    import h5py
    import torch

    from vlbias.images.store import build_image_store
    from vlbias.io.cache import RecordCache
    from vlbias.models import build
    from vlbias.suites.ieat import embed_image_store

    torch.set_num_threads(args.threads)
    print(f"device {args.device}, {args.threads} threads, torch {torch.__version__}")
    print(f"{'encoder':<20} {'batch':>5} {'n':>4} {'model img/s':>12} {'stage img/s':>12} {'outside model':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_images(tmp, max(max(args.batches), 4), 640, 480)
        for name in args.encoders:
            spec, size, resample = ENCODERS[name]
            for batch in args.batches:
                n = max(batch, 4)
                encoder = build({**spec, "device": args.device, "batch_size": batch, "threads": args.threads})
                entries = [{"category": "c", "file": p.name, "path": p} for p in paths[:n]]
                store = Path(tmp, f"{name}-{batch}.h5")
                build_image_store(entries[:1], store, size, crop="top-left", resample=resample)
                embed_image_store(store, encoder, Path(tmp, "warm.h5"), {})  # warm-up: first-call costs
                build_image_store(entries, store, size, crop="top-left", resample=resample)
                with h5py.File(store) as f:
                    pixels = f["c/pixels"][()]
                forward = model_alone(encoder, pixels[:batch])

                def model():
                    with torch.inference_mode():
                        for _ in range(0, n, batch):
                            forward()

                t_model = timed(model, args.repeats)

                runs = iter(range(args.repeats))

                def stage():
                    build_image_store(entries, store, size, crop="top-left", resample=resample)
                    with RecordCache(Path(tmp, f"cache-{name}-{batch}-{next(runs)}")) as cache:  # empty each run
                        embed_image_store(store, encoder, Path(tmp, f"{name}-{batch}.emb.h5"), {}, cache)

                t_stage = timed(stage, args.repeats)
                print(f"{name:<20} {batch:>5} {n:>4} {n / t_model:>12.3f} {n / t_stage:>12.3f} "
                      f"{1 - t_model / t_stage:>14.0%}", flush=True)


if __name__ == "__main__":
    main()
