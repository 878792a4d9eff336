"""Benchmark: the grounded embedding stage against the model alone, every grounded family; and the whole
grid of grounded tests through the statistics engine.

1. Embedding (``--only embed``): for each family of config/config.yaml's grounded models (visualbert,
   lxmert, vilbert, vlbert; blip, flava, vilt, bridgetower of the extended tables), tiny (tests/helpers/
   tiny.py's models) and base (the published architectures: the config classes' defaults, e.g. BLIP's
   ViT-B/16 at 384 pixels under a 12-layer text encoder, FLAVA flava-full's, LXMERT 9/5/5 layers), with
   random weights, at each of ``--precisions`` and ``--batch-sizes``:

   stage        the grounded embedding job as workflow/scripts/grounded_embed.py runs it, less the model's
                loading: the region store and a fresh embedding cache opened, then
                ``vlbias.suites.grounded.jobs.embed_tests`` with the keyword arguments that script passes,
                into a new HDF5 file; pairs/s = the pairs the file holds / wall seconds.
   model alone  the seconds spent inside the model's torch modules during that same run: global module
                forward pre/post hooks time each outermost ``nn.Module`` call (a module called inside
                another is not counted twice; a vision tower the adapter calls on its own is counted), so
                the figure holds whatever the adapter does around its modules. Reported as pairs per
                model-second, and the stage's overhead, 1 - model / stage: tokenizing, image decoding and
                processing, region reads, batching, the cache and the HDF5 writes; and per pair, host ms/pair =
                (stage - model) / pairs: what a GPU does not shrink, so what bounds it there. The hooks cost
                some microseconds per module call, in both figures: nothing at base size, a little at tiny.

   The mini-job: a real stimulus (``--stimulus``, resources/stimuli/grounded/google/weat6.yaml), its
   first ``--images`` // 6 images of each of the six image sets, each with its own captions (8 per image
   at the sentence level), at the config's levels and masks (grounded.levels W/S/C, grounded.masks T and
   I at S): each image is read by many pairs, as in the real Google job (225,496 pairs over 12,185
   images). The images are generated 640x480 JPEGs (benchmarks/regions.py's) the pixel-reading
   families decode as the job does; the region store holds 36 regions per image (random features of the
   family's width, 2048 where it reads none; boxes; about a fifth persons, mask I's). Each figure is the
   fastest of ``--repeats`` runs, after a warm-up job of one image per set at level S (its seconds, and the
   model's build, are recorded beside: what a run of the benchmark costs beyond the figures). ``/proc/loadavg`` is
   recorded before and after each row: the machine may be shared (there, ``--threads 1``: torch's
   threads wait on each other when the cores are busy). ``vlbias`` is imported from PYTHONPATH, so the
   same command measures two source trees (``PYTHONPATH=<tree>/src``; the first line names the tree).

2. Statistics (``--only grid``): every (test, model, level, experiment[, mask]) of the stimulus files,
   i.e. the paper's four models and BLIP x the levels of config/config.yaml (grounded.levels, W/S/C) x
   experiments 1, 2, 3, and 3-masked with T (all models) and I (all but VisualBERT) at the levels
   grounded.masks lists (the paper: S), on random embeddings with each test's real set sizes, through
   vlbias.stats.grounded with ``n_samples`` from the config (stats.n_samples): total seconds and tests/s
   (numba's compile time is excluded by a warm-up test).

    python benchmarks/grounded_embed.py [--only embed|grid] [--sizes tiny,base] [--images 24,12]
        [--families visualbert,lxmert,vilbert,vlbert,blip,flava,vilt,bridgetower] [--batch-sizes 32]
        [--precisions fp32,bf16] [--threads 2] [--repeats 1] [--device cpu] [--stimulus PATH] [--out FILE]
        [--datasets google,coco,concap] [--n-samples N]
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(Path(__file__).parent)]
from helpers.tiny import (  # noqa: E402  (the tests' tiny models; the benchmarks' image generator)
    TINY_BLIP, TINY_BRIDGETOWER, TINY_FLAVA, TINY_VILT, TINY_VL, tiny_bpe_tokenizer)
from regions import make_images  # noqa: E402

from vlbias.stats.grounded import grounded_test  # noqa: E402
from vlbias.suites.grounded.stimulus import ROLES, load_grounded_stimulus  # noqa: E402

LOADER, DUMPER = getattr(yaml, "CSafeLoader", yaml.SafeLoader), getattr(yaml, "CSafeDumper", yaml.SafeDumper)
CONFIG = yaml.load((REPO / "config/config.yaml").read_text(), Loader=LOADER)
# every family of the grounded models (the paper's columns and the extended tables'), in the config's order
FAMILIES = list(dict.fromkeys(m["adapter"] for m in CONFIG["grounded"]["models"].values()))
TINY = {**{f: TINY_VL[f] for f in ("visualbert", "lxmert", "vilbert", "vlbert")}, "blip": TINY_BLIP,
        "flava": TINY_FLAVA, "vilt": TINY_VILT, "bridgetower": TINY_BRIDGETOWER}
# base: the config classes' defaults, the published architectures. BridgeTower's RoBERTa tokenizer is
# no package's: the tests' 400-entry byte-level BPE stands in, so its vocabulary (embedding table) is
# 400 rows, not roberta-base's 50,265, and its captions split into more tokens
BASE = {f: {"config": {}} for f in FAMILIES} | {"bridgetower": {"config": {"text_config": {"vocab_size": 400}}}}
STIMULUS = REPO / "resources/stimuli/grounded/google/weat6.yaml"
N_REGIONS, FEATURE_DIM, IMAGE_SIZE = 36, 2048, (480, 640)  # (height, width)
LEVELS = {"W": "word", "S": "sentence", "C": "sentence"}  # embedding level -> stimulus level
# the grid's models and the masks each takes (VisualBERT was never pre-trained with masked regions: no I)
GRID_MODELS = {"visualbert": ("T",), "lxmert": ("T", "I"), "vilbert": ("T", "I"), "vlbert": ("T", "I"),
               "blip": ("T", "I")}
GRID_DIM = 768


class ModelClock:
    """Seconds spent inside torch modules while active: global forward pre/post hooks time the outermost
    module call of each nesting (a call made inside another module's forward is part of that one).
    ``sync`` (torch.cuda.synchronize on a GPU) is called at both ends, so queued kernels are counted."""

    def __init__(self, sync=None):
        self.sync, self.seconds, self.calls, self.depth, self.handles = sync, 0.0, 0, 0, []

    def _pre(self, module, args):
        if self.depth == 0:
            if self.sync:
                self.sync()
            self.start = time.perf_counter()
        self.depth += 1

    def _post(self, module, args, output):
        self.depth -= 1
        if self.depth == 0:
            if self.sync:
                self.sync()
            self.seconds += time.perf_counter() - self.start
            self.calls += 1

    def __enter__(self):
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self.handles = [register_module_forward_pre_hook(self._pre),
                        register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()


def mini_stimulus(doc, per_set, path):
    """A stimulus file at ``path``: ``doc`` (a stimulus file's contents) with the first ``per_set`` images
    of each image set at each level, each keeping its own caption indices (captions, words and mask
    terms unchanged)."""
    levels = {name: {**level, "images": {role: {**level["images"][role],
                                                "pairs": dict(list(level["images"][role]["pairs"].items())[:per_set])}
                                         for role in ROLES}}
              for name, level in doc["levels"].items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(yaml.dump({**doc, "levels": levels}, Dumper=DUMPER, sort_keys=False))
    return load_grounded_stimulus(path)


def write_images(image_ids, folder):
    """Acquisition-manifest rows (test, role, file, path, status ok) of a generated JPEG per image id."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    paths = make_images(Path(folder), len(image_ids), IMAGE_SIZE[1], IMAGE_SIZE[0])
    return [dict(zip(("test", "role", "file"), i.split("/")), path=str(p), status="ok")
            for i, p in zip(image_ids, paths)]


def write_store(path, image_ids, dim, seed=0):
    """A region store as the regions rule writes it, from a stand-in detector: N_REGIONS random boxes of
    ``dim``-d random features per image, about a fifth of them persons (at least one)."""
    from vlbias.regions.store import write_region_store
    from vlbias.visual import Regions

    rng = np.random.default_rng(seed)
    detector = SimpleNamespace(name="random", feature_dim=dim, class_names=["person", "thing"], attribute_names=None,
                               person_classes=frozenset({"person"}), weights="random",
                               settings={"adapter": "random", "min_boxes": N_REGIONS, "max_boxes": N_REGIONS,
                                         "conf": 0.0})
    h, w = IMAGE_SIZE
    with write_region_store(path, detector, {"detector": "random"}) as store:
        for image_id in image_ids:
            xy = np.sort(rng.random((N_REGIONS, 2, 2)), axis=1) * [w, h]  # [:, 0] <= [:, 1]
            boxes = np.concatenate([xy[:, 0], xy[:, 1]], axis=1).astype(np.float32)  # x1, y1, x2, y2
            classes = (rng.random(N_REGIONS) >= 0.2).astype(np.int64)
            classes[0] = 0
            store.add([(image_id, Regions(boxes=boxes, features=rng.random((N_REGIONS, dim), dtype=np.float32) * 4,
                                          class_ids=classes, class_scores=np.ones(N_REGIONS, np.float32),
                                          image_size=IMAGE_SIZE))])
    return path


def stage(encoder, stimulus, store_path, manifest, out, cache_dir, levels=None, masks=None):
    """Wall seconds of the grounded embedding job (workflow/scripts/grounded_embed.py's embed_tests call,
    on a fresh cache; at the config's levels and masks unless given), and the pairs it embedded."""
    import h5py

    from vlbias.io.cache import RecordCache
    from vlbias.regions.store import RegionStore
    from vlbias.suites.grounded.jobs import embed_tests

    levels = levels or CONFIG["grounded"]["levels"]
    masks = CONFIG["grounded"]["masks"] if masks is None else masks
    t = time.perf_counter()
    with RegionStore(store_path) as store, RecordCache(cache_dir) as cache:
        embed_tests([stimulus], encoder, store, out, levels, masks, manifest_rows=manifest, cache=cache,
                    image_mask="persons", mask_labels=None, label_offset=0,
                    attrs={"protocol": "benchmark", "dataset": stimulus.dataset, "model": encoder.info["adapter"]})
    seconds = time.perf_counter() - t
    with h5py.File(out, "r") as f:
        pairs = [0]
        f.visititems(lambda name, g: pairs.append(g.attrs["n"]) if "n" in g.attrs else None)
    return seconds, int(sum(pairs))


def measure(encoder, stimulus, warm, store, manifest, repeats):
    """The fastest of ``repeats`` stage runs on ``stimulus`` (after one on ``warm``'s sentence captions
    unmasked: the first calls' lazy initialisation), with the model's own seconds in that run."""
    import torch

    sync = torch.cuda.synchronize if encoder.device.type == "cuda" else None
    best = None
    with tempfile.TemporaryDirectory(prefix="run-") as folder:
        warm_up = stage(encoder, warm, store, manifest, Path(folder, "warm-up.h5"), Path(folder, "cache-warm-up"),
                        levels=["S"], masks={})[0]
        for r in range(repeats):
            with ModelClock(sync) as clock:
                seconds, pairs = stage(encoder, stimulus, store, manifest, Path(folder, f"{r}.h5"),
                                       Path(folder, f"cache-{r}"))
            if best is None or seconds < best[0]:
                best = seconds, clock.seconds, clock.calls, pairs
    seconds, model, calls, pairs = best
    return {"status": "ok", "warm_up_s": warm_up, "pairs": pairs, "stage_s": seconds, "model_s": model,
            "module_calls": calls, "stage_pairs_s": pairs / seconds, "model_pairs_s": pairs / model if model else None,
            "overhead": 1 - model / seconds, "host_ms_per_pair": 1000 * (seconds - model) / pairs}


def loadavg():
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""


def entry(family, size, precision, batch_size, args, folder):
    """The adapter entry of ``family`` at ``size``, as the workflow builds it (+ its threads)."""
    spec = TINY[family] if size == "tiny" else {"adapter": family, "weights": "random", "seed": 0, **BASE[family]}
    spec = {**spec, "device": args.device, "precision": precision, "batch_size": batch_size, "threads": args.threads}
    if family == "bridgetower":
        spec["tokenizer"] = str(folder / "bpe") if (folder / "bpe").is_dir() else tiny_bpe_tokenizer(folder / "bpe")
    return spec


def bench_embed(args):
    from vlbias.errors import InputError
    from vlbias.models import build

    rows = []
    doc = yaml.load(args.stimulus.read_text(), Loader=LOADER)
    with tempfile.TemporaryDirectory(prefix="grounded-embed-") as tmp:
        tmp = Path(tmp)
        for size, n_images in zip(args.sizes, args.images):
            per_set = max(1, n_images // len(ROLES))
            stimulus = mini_stimulus(doc, per_set, tmp / size / args.stimulus.name)
            warm = mini_stimulus(doc, 1, tmp / size / "warm-up" / args.stimulus.name)
            ids = stimulus.image_ids()
            manifest = write_images(ids, tmp / size / "images")
            stores = {}
            for family in args.families:
                for precision in args.precisions:
                    for bs in args.batch_sizes:
                        row = {"family": family, "size": size, "precision": precision, "batch": bs,
                               "threads": args.threads, "device": args.device, "loadavg_start": loadavg()}
                        try:
                            t = time.perf_counter()
                            encoder = build(entry(family, size, precision, bs, args, tmp))
                            row["build_s"] = time.perf_counter() - t
                        except InputError as e:  # e.g. a precision the runtime refuses
                            print(f"{family} {size} {precision}: not run ({e})", flush=True)
                            rows.append({**row, "status": f"not run: {e}"})
                            continue
                        dim = encoder.feature_dim or FEATURE_DIM
                        if dim not in stores:
                            stores[dim] = write_store(tmp / size / f"regions-{dim}.h5", ids, dim)
                        row |= measure(encoder, stimulus, warm, stores[dim], manifest, args.repeats)
                        row |= {"images": len(ids), "pairs_per_image": row["pairs"] / len(ids),
                                "parameters": sum(p.numel() for p in encoder.model.parameters()),
                                "loadavg_end": loadavg()}
                        rows.append(row)
                        print_row(row)
                        del encoder
    return rows


HEADER = (f"{'family':<12}{'size':<5}{'prec':<5}{'batch':>6}{'thr':>4}{'pairs':>7}{'images':>7}{'stage s':>9}"
          f"{'model s':>9}{'stage/s':>9}{'model/s':>9}{'overhead':>9}{'host ms/pair':>13}  loadavg start -> end")


def print_row(row):
    if row.get("status") != "ok":
        return
    print(f"{row['family']:<12}{row['size']:<5}{row['precision']:<5}{row['batch']:>6}{row['threads']:>4}"
          f"{row['pairs']:>7}{row['images']:>7}{row['stage_s']:>9.2f}{row['model_s']:>9.2f}"
          f"{row['stage_pairs_s']:>9.1f}{row['model_pairs_s'] or 0:>9.1f}{row['overhead']:>8.1%}{row['host_ms_per_pair']:>13.3f}"
          f"  {row['loadavg_start']} -> {row['loadavg_end']}", flush=True)


def grid_cells(datasets, levels, masks):
    """(test, model, level, experiment, mask, set sizes) of every grounded test: experiments 1, 2, 3
    at each of ``levels``, 3-masked with each mask a model takes at the levels ``masks`` lists."""
    cells = []
    for dataset in datasets:
        for path in sorted((REPO / "resources/stimuli/grounded" / dataset).glob("*.yaml")):
            stimulus = load_grounded_stimulus(path)
            for level in levels:
                if LEVELS[level] not in stimulus.levels:
                    continue
                sizes = tuple(len(stimulus.pairs(LEVELS[level], r)) for r in ROLES)
                for model, model_masks in GRID_MODELS.items():
                    runs = [("1", None), ("2", None), ("3", None)]
                    runs += [("3-masked", m) for m in model_masks if level in masks.get(m, [])]
                    cells += [(f"{dataset}/{stimulus.id}", model, level, e, m, sizes) for e, m in runs]
    return cells


def bench_grid(args):
    n_samples = args.n_samples or CONFIG["stats"]["n_samples"]
    grounded = CONFIG.get("grounded") or {}
    levels, masks = grounded.get("levels", list(LEVELS)), grounded.get("masks", {"T": ["S"], "I": ["S"]})
    cells = grid_cells(args.datasets, levels, masks)
    rng = np.random.default_rng(0)

    def run(cell):
        sets = [rng.standard_normal((n, GRID_DIM), dtype=np.float32) for n in cell[5]]
        t = time.perf_counter()
        grounded_test(cell[3], *sets, n_samples=n_samples, seed=0, exact="auto")
        return time.perf_counter() - t

    run(cells[0]), run(next(c for c in cells if c[3] == "3"))  # numba compiles its kernels once
    seconds = {}
    for cell in cells:
        seconds[cell[3]] = seconds.get(cell[3], 0.0) + run(cell)
    total = sum(seconds.values())
    sizes = [sum(c[5][:2]) for c in cells]
    print(f"grid: {len(cells)} tests ({len({c[0] for c in cells})} stimulus files, {len(GRID_MODELS)} models, "
          f"levels {'/'.join(levels)}, experiments 1, 2, 3, 3-masked {masks}; |X|+|Y| {min(sizes)}..{max(sizes)}), "
          f"n_samples {n_samples}, dim {GRID_DIM}: {total:.1f} s, {len(cells) / total:.1f} tests/s", flush=True)
    for experiment, s in seconds.items():
        n = sum(c[3] == experiment for c in cells)
        print(f"  experiment {experiment}: {n} tests, {s:.1f} s ({n / s:.1f} tests/s)")
    return {"tests": len(cells), "seconds": total, "tests_s": len(cells) / total, "n_samples": n_samples}


def main(argv=None):
    numbers = lambda s: [int(x) for x in s.split(",")]
    names = lambda s: s.split(",")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["embed", "grid"])
    ap.add_argument("--sizes", default="tiny,base", type=names)
    ap.add_argument("--images", default="24,12", type=numbers,
                    help="distinct images of the mini-job, one number per size (whole images per image set)")
    ap.add_argument("--families", default=",".join(FAMILIES), type=names)
    ap.add_argument("--batch-sizes", default="32", type=numbers)
    ap.add_argument("--precisions", "--precision", default="fp32", type=names,
                    help="fp32, bf16 (the entry's precision: torch.autocast to bfloat16)")
    ap.add_argument("--threads", type=int, default=CONFIG["grounded"]["experiments"]["threads"],
                    help="torch's threads, as the entry's `threads` (default: the config's grounded.experiments)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each mini-job; the fastest counts")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--stimulus", default=STIMULUS, type=Path, help="the grounded stimulus the mini-job cuts")
    ap.add_argument("--out", type=Path, help="a JSON file of every figure (rows, grid, settings)")
    ap.add_argument("--datasets", default="google,coco,concap", type=names)
    ap.add_argument("--n-samples", type=int, default=None, help="default: stats.n_samples of config/config.yaml")
    args = ap.parse_args(argv)
    if len(args.images) != len(args.sizes) or set(args.sizes) - {"tiny", "base"}:
        ap.error("--sizes from tiny, base, and one --images number per size")
    if set(args.families) - set(FAMILIES):
        ap.error(f"--families from {', '.join(FAMILIES)}")
    import torch

    import vlbias

    report = {"argv": sys.argv[1:] if argv is None else list(argv), "torch": torch.__version__,
              "vlbias": str(Path(vlbias.__file__).parent), "loadavg_start": loadavg(), "rows": [], "grid": None}
    print(f"torch {torch.__version__}, {args.threads} threads, device {args.device}; vlbias from "
          f"{report['vlbias']}; loadavg {report['loadavg_start']}", flush=True)
    if args.only != "grid":
        print(HEADER, flush=True)
        report["rows"] = bench_embed(args)
    if args.only != "embed":
        report["grid"] = bench_grid(args)
    report["loadavg_end"] = loadavg()
    print(f"loadavg {report['loadavg_start']} -> {report['loadavg_end']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))
    return report


if __name__ == "__main__":
    main()
