"""Grounded WEAT/SEAT stimulus files (Ross, Katz & Barbu 2021): the loader the workflow uses.

A file ``resources/stimuli/grounded/<dataset>/<id>.yaml`` (schema ``grounded_stimulus.schema.yaml``,
written by :mod:`vlbias.suites.grounded.convert`) defines one test at up to two levels (word,
sentence): captions of the sets X, Y, A, B and six image sets (X, Y, A_x, A_y, B_x, B_y), each image
paired with the indices of its captions.

Google images are identified as in the acquisition manifest, ``<dataset_dir>/<role>/<file>``;
COCO and Conceptual Captions images (``dataset_dir: null``) as ``<test id>/<image set>/<file>``, the
acquisition id of vlbias.suites.grounded.sources' manifests.

Caption indices that upstream wrote as text (coco/sent-weat6: ``"12"``) are kept so in the file and
read by ``caption_indices`` (protocol switch, docs/grounded.md row 7): ``number`` reads "12" as
caption 12 (the evident intent: one caption per image, as everywhere else); ``digits`` as
captions 1 and 2, what the authors' loaders did (they iterate over the value,
scripts/dataloaders/visualbert/bias_dataset.py:77, lxmert/lxmert_bias_data.py:43).
"""

from dataclasses import dataclass
from pathlib import Path

from vlbias.errors import InputError
from vlbias.io.stimuli import read_stimulus_file
from vlbias.stats.row import GROUNDED_ROLES as ROLES

SCHEMA = "grounded_stimulus.schema.yaml"
CAPTION_INDICES = ("number", "digits")


@dataclass(frozen=True)
class GroundedStimulus:
    id: str
    name: str
    dataset: str
    labels: dict  # X, Y, A, B -> the upstream category names
    levels: dict  # "word" / "sentence" -> the level mapping of the file (caption indices read as lists)
    path: str
    caption_indices: str = "number"  # how caption indices written as text were read

    def image_id(self, level, role, file):
        """The image's id in the acquisition manifest: ``<dataset_dir>/<get.sh folder>/<file>``
        (google) or ``<test id>/<image set>/<file>`` (coco, concap; see vlbias.suites.grounded.sources)."""
        lv = self.levels[level]
        if lv["dataset_dir"]:
            return f"{lv['dataset_dir']}/{lv['images'][role]['role']}/{file}"
        return f"{self.id}/{role}/{file}"

    def pairs(self, level, role):
        """The (caption, image id) pairs of one image set (X, Y, A_x, A_y, B_x, B_y), in file order:
        each image with each caption it is paired with."""
        lv = self.levels[level]
        captions = lv["captions"][role[0]]
        return [(captions[i], self.image_id(level, role, f))
                for f, idx in lv["images"][role]["pairs"].items() for i in idx]

    def image_ids(self, level=None):
        """Every image id the test uses (at one level, or at all), sorted, each once."""
        return sorted({self.image_id(lv, r, f) for lv in ([level] if level else self.levels)
                       for r in ROLES for f in self.levels[lv]["images"][r]["pairs"]})


def load_grounded_stimulus(path, caption_indices="number"):
    """Load and validate one grounded stimulus file; errors name the file and the key.

    ``caption_indices``: how an index upstream wrote as text is read, "number" or "digits" (see above).
    """
    if caption_indices not in CAPTION_INDICES:
        raise InputError(f"caption_indices '{caption_indices}'", f"must be one of {', '.join(CAPTION_INDICES)}")
    path = Path(path)
    doc = read_stimulus_file(path, SCHEMA, "id, name, suite, dataset, X, Y, A, B, levels")
    for name, lv in doc["levels"].items():
        google = doc["dataset"] == "google"
        if google != (lv["dataset_dir"] is not None):
            raise InputError(path, f"key 'levels/{name}/dataset_dir': required for google images, null otherwise")
        for r in ROLES:
            img = lv["images"][r]
            if google != ("role" in img):
                raise InputError(path, f"key 'levels/{name}/images/{r}/role': required for google images only")
            n = len(lv["captions"][r[0]])
            for file, idx in img["pairs"].items():
                if isinstance(idx, str):
                    idx = img["pairs"][file] = [int(idx)] if caption_indices == "number" else [int(c) for c in idx]
                if max(idx) >= n:
                    raise InputError(path, f"key 'levels/{name}/images/{r}/pairs/{file}': caption index "
                                           f"{max(idx)} out of range (set {r[0]} has {n} captions)")
    return GroundedStimulus(id=doc["id"], name=doc["name"], dataset=doc["dataset"],
                            labels={s: doc[s]["label"] for s in "XYAB"}, levels=doc["levels"], path=str(path),
                            caption_indices=caption_indices)
