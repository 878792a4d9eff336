"""Benchmark: the bottom-up TSV reader (vlbias.regions.tsv.read_tsv_regions): peak memory and time
against the number of images in the file.

For each N a TSV file of N synthetic images as LXMERT's released files hold them (36 boxes of
2048-d float32 features, labels and attributes, base64; ~0.4 MB a line) is generated, every image
wanted by the manifest, and read into a region store in a fresh process, whose peak resident
memory (ru_maxrss) and import-free reading time are reported, with whether torch was imported. A
reader that streams (each image written as it is parsed) keeps its peak flat in N; one that holds
every wanted image until the end grows by ~0.3 MiB an image.

    python benchmarks/regions_tsv.py [--images 500,1000,2000] [--boxes 36] [--dim 2048]

To compare with another version of the reader, run it with that version's src first on
PYTHONPATH (e.g. ``git archive <commit> src | tar -x -C /tmp/before``).
"""

import argparse
import base64
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

FIELDS = ("img_id", "img_h", "img_w", "objects_id", "objects_conf", "attrs_id", "attrs_conf", "num_boxes", "boxes",
          "features")  # LXMERT's order (vlbias.regions.tsv.LXMERT_FIELDS)


def write_tsv(path, n, boxes, dim, seed=0):
    """A TSV of n images, COCO_val2014_<id> ids, in a shuffled id order (as released files are)."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for image in rng.permutation(n) + 1:
            xy = rng.uniform(0, 400, (boxes, 2)).astype(np.float32)
            arrays = {"objects_id": rng.integers(0, 1600, boxes), "objects_conf": rng.random(boxes, np.float32),
                      "attrs_id": rng.integers(0, 400, boxes), "attrs_conf": rng.random(boxes, np.float32),
                      "boxes": np.concatenate([xy, xy + rng.uniform(1, 80, (boxes, 2))], axis=1).astype(np.float32),
                      "features": rng.random((boxes, dim), np.float32)}
            item = {"img_id": f"COCO_val2014_{image:012d}", "img_h": "480", "img_w": "640", "num_boxes": str(boxes),
                    **{k: base64.b64encode(v.tobytes()).decode() for k, v in arrays.items()}}
            f.write("\t".join(item[k] for k in FIELDS) + "\n")


def child(folder, n, dim):
    """One fresh process: read the TSV of n images into a store; prints one JSON line."""
    import time

    from vlbias.regions.tsv import TsvSource, read_tsv_regions

    folder = Path(folder)
    entries = [(f"weat6/A/COCO_val2014_{i:012d}.jpg", "/nowhere") for i in range(1, n + 1)]
    source = TsvSource({"objects_vocab": str(folder / "objects.txt"), "attributes_vocab": str(folder / "attrs.txt"),
                        "fields": "lxmert", "feature_dim": dim})
    started = time.perf_counter()
    summary = read_tsv_regions(folder / f"{n}.tsv", entries, source, folder / f"{n}.h5")
    print(json.dumps({"n": n, "seconds": time.perf_counter() - started, "n_images": summary["n_images"],
                      "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "torch": "torch" in sys.modules}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", default="500,1000,2000", help="comma-separated N")
    ap.add_argument("--boxes", type=int, default=36)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), args.dim)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "objects.txt").write_text("\n".join(f"object{i}" for i in range(1600)))
        Path(tmp, "attrs.txt").write_text("\n".join(f"attribute{i}" for i in range(400)))
        print(f"{'N':>6} {'TSV MiB':>8} {'peak RSS MiB':>13} {'seconds':>8} {'images/s':>9} {'torch':>6}")
        for n in map(int, args.images.split(",")):
            write_tsv(Path(tmp, f"{n}.tsv"), n, args.boxes, args.dim)
            out = subprocess.run([sys.executable, __file__, "--child", tmp, str(n), "--dim", str(args.dim)],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            size = Path(tmp, f"{n}.tsv").stat().st_size / 2**20
            print(f"{n:>6} {size:>8.0f} {r['peak_mib']:>13.0f} {r['seconds']:>8.1f} {n / r['seconds']:>9.0f} "
                  f"{str(r['torch']):>6}", flush=True)
            for suffix in ("tsv", "h5"):
                Path(tmp, f"{n}.{suffix}").unlink()


if __name__ == "__main__":
    main()
