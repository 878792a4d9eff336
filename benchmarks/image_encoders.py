"""Benchmark: images/s of the iEAT image encoders, the model alone against the whole stage, in one run;
texts/s of those with a text tower.

For each encoder (random weights: the speed is the real model's), at batch 1 and batch 32:
- model:   the network's forward pass alone on inputs prepared beforehand (iGPT: token contexts;
           SimCLRv2, CLIP: float tensors; transformers' CLIP and SigLIP: the processor's outputs);
- stage:   from JPEG files on disk, what the workflow's two jobs run (workflow/scripts/ieat_images.py,
           embed_images.py): the image store (decode, square crop, resize;
           ``vlbias.images.store.build_image_store``) then the embedding store
           (``vlbias.suites.ieat.embed_image_store``: quantisation or normalisation, model, writes to
           an empty record cache, as a first run, and the HDF5 store); not the process start and the
           model's loading, which a job pays once.
Images are generated 640x480 JPEGs (benchmarks/regions.py), as many as the batch (at least 4);
each figure is the best of ``--repeats`` runs, after a one-image warm-up. A negative share outside
the model means the machine's load changed between the two measurements: noise, not a result.
For an encoder with a text tower (open_clip, hf_dual), texts/s at the same batch sizes: the model
alone on token ids prepared beforehand, and ``encode_texts`` (tokenizer and model), on generated
sentences of 6 to 15 words.

    python benchmarks/image_encoders.py [--encoders igpt-s igpt-s-layer-and-logits simclr-r152-3x-sk1
                                                    simclr-r50-1x-sk1 clip-vit-b-32 hf-clip-vit-b-16
                                                    hf-siglip-b-16]
                                        [--batches 1 32] [--device cpu] [--threads 2] [--repeats 1]
                                        [--towers images texts]
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
    # transformers' CLIP ViT-B/16 (openai/clip-vit-base-patch16's configuration: CLIPConfig's defaults, patch
    # 16) and SigLIP B/16 at 224 (google/siglip-base-patch16-224's: SiglipConfig's defaults), hf_dual with a
    # processor written offline (CLIP's own tokenizer; SigLIP's byte-level stand-in, texts padded to 64);
    # store at 224, bicubic
    "hf-clip-vit-b-16": ({"adapter": "hf_dual", "architecture": "clip", "weights": "random",
                          "config": {"vision_config": {"patch_size": 16}}}, 224, "bicubic"),
    "hf-siglip-b-16": ({"adapter": "hf_dual", "architecture": "siglip", "weights": "random"}, 224, "bicubic"),
}
WORDS = "the a photo of man woman doctor nurse child flower insect happy sad old young city beach".split()


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
    if encoder.info["adapter"] == "hf_dual":
        from PIL import Image

        x = encoder.processor(images=[Image.fromarray(p) for p in pixels], return_tensors="pt")
        return lambda: encoder.model.get_image_features(**x)
    x = encoder.preprocess(torch.from_numpy(pixels))
    return lambda: encoder.model.encode_image(x)


def text_model_alone(encoder, texts):
    """A callable running only the text tower on token ids prepared from ``texts``."""
    if encoder.info["adapter"] == "hf_dual":
        x = encoder.processor(text=texts, padding=encoder.padding, truncation=True, max_length=encoder.context_length,
                              return_tensors="pt")
        return lambda: encoder.model.get_text_features(**x)
    import open_clip

    tokens = open_clip.get_tokenizer(encoder.tokenizer_name, context_length=encoder.info["context_length"])(texts)
    return lambda: encoder.model.encode_text(tokens)


def sentences(n, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(6, 16))) for _ in range(n)]


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
    parser.add_argument("--towers", nargs="+", default=["images", "texts"], choices=["images", "texts"],
                        help="measure the image side, the text side (encoders with a text tower), or both")
    args = parser.parse_args()

    import h5py
    import torch

    from vlbias.images.store import build_image_store
    from vlbias.io.cache import RecordCache
    from vlbias.models import build
    from vlbias.models.hf_dual import write_processor
    from vlbias.suites.ieat import embed_image_store

    torch.set_num_threads(args.threads)
    print(f"device {args.device}, {args.threads} threads, torch {torch.__version__}")
    print("rows '<encoder> (texts)': texts/s of the text tower alone and of encode_texts (tokenizer and model)")
    print(f"{'encoder':<20} {'batch':>5} {'n':>4} {'model img/s':>12} {'stage img/s':>12} {'outside model':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_images(tmp, max(max(args.batches), 4), 640, 480)
        for name in args.encoders:
            spec, size, resample = ENCODERS[name]
            if spec["adapter"] == "hf_dual":  # random weights: the processor from files written here
                context = {"clip": 77, "siglip": 64}[spec["architecture"]]  # the config classes' default
                spec = {**spec, "processor": str(write_processor(Path(tmp, name), spec["architecture"], size, context))}
            for batch in args.batches:
                n = max(batch, 4)
                encoder = build({**spec, "device": args.device, "batch_size": batch, "threads": args.threads})
                if "images" in args.towers:
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
                if "texts" in args.towers and hasattr(encoder, "encode_texts"):
                    texts = sentences(n)
                    encoder.encode_texts(texts[:1])  # warm-up
                    forward = text_model_alone(encoder, texts[:batch])

                    def text_model():
                        with torch.inference_mode():
                            for _ in range(0, n, batch):
                                forward()

                    print(f"{name + ' (texts)':<20} {batch:>5} {n:>4} {n / timed(text_model, args.repeats):>12.3f} "
                          f"{n / timed(lambda: encoder.encode_texts(texts), args.repeats):>12.3f}", flush=True)


if __name__ == "__main__":
    main()
