"""The grounded protocol: the paper's text or the authors' code, one documented switch per difference.

Ross et al.'s printed Tables 3-7 came from their code (candacelax/bias-in-vision-and-language @
162298016af6d728453a8c3d47554a6e87e18be2), which differs from the paper's text in the places below
(docs/grounded.md has the table with the evidence). A protocol is a preset, ``authors`` (what
produced the printed numbers) or ``paper`` (what the text says), optionally with single switches
flipped, so the effect of each undocumented choice can be seen on its own:

    resolve("authors")                                   # every switch as the authors' code
    resolve({"preset": "paper", "token_mask": "word"})   # the paper, but the authors' token mask

Each switch acts in one place of the pipeline (``Switch.acts_in``): the VisualBERT model and its
detector (row 1), the vision-language encoders' options (rows 3, 6), the regions masked by mask I
(row 5), the stimulus loader (row 7), the experiment job (row 4), what the ViLBERT and VL-BERT
encoders are fed (rows 8-12: encoder options of those families, the ``feeds`` their schemas declare). Row 2 (VisualBERT's region
token type) is no switch: both presets use the value VisualBERT was pre-trained with (vlbias.models.visualbert).
"""

from dataclasses import dataclass

from vlbias.errors import InputError
from vlbias.models.families import feeds, ws_vectors


@dataclass(frozen=True)
class Switch:
    row: int          # the row of docs/grounded.md's table
    values: tuple     # (the paper's value, the authors' value)
    acts_in: str      # where the workflow applies it
    meaning: str


SWITCHES = {
    "visualbert": Switch(
        1, ("paper", "authors"), "the VisualBERT model entry and its region detector",
        "paper: uclanlp/visualbert-vqa-coco-pre on 2048-d bottom-up (Visual Genome) regions; authors: "
        "nlvr2_coco_pre_trained.th (uclanlp/visualbert-nlvr2-coco-pre), visual_embedding_dim 1024, on the "
        "fc7 features of Detectron's COCO R-101-FPN (detector detectron_fpn, 10-100 boxes at 0.2, "
        "image_feature_cap 144)"),
    "ws_vector": Switch(
        3, ("language", "language+visual"), "encoder option of two-stream models (LXMERT, ViLBERT)",
        "W and S vectors: the language [CLS] state, or it concatenated with the vision stream's first state"),
    "masked_statistic": Switch(
        4, ("2", "1"), "experiment job (run_experiments)",
        "experiment 3 with masking runs experiment 2's test (the text) or experiment 1's (the code)"),
    "image_mask": Switch(
        5, ("persons", "labels"), "embedding job: the regions mask I hides",
        "persons: every region the detector labels as a person (the store's is_person); labels: regions "
        "whose label is one of the test's mask.region_labels (vlbias.visual.regions_with_labels)"),
    "token_mask": Switch(
        6, ("piece", "word"), "encoder option of every vision-language model",
        "mask T: one [MASK] per sub-token of every mask term, or one [MASK] per occurrence of the first "
        "term found, [PAD] appended"),
    "caption_indices": Switch(
        7, ("number", "digits"), "stimulus loader (load_grounded_stimulus)",
        "caption indices upstream wrote as text (\"12\"): caption 12, or captions 1 and 2"),
    "vilbert_padding": Switch(
        8, ("masked", "attended"), "encoder option of ViLBERT",
        "text and region padding masked, or the model called without attention masks on captions padded to "
        "36 [PAD]s (the authors' loader and model call)"),
    "vilbert_image_mask": Switch(
        9, ("regions", "in_place"), "encoder option of ViLBERT (and the embedding job: the regions masked in "
                                    "every run; pairs of images with fewer than 36 regions left out)",
        "mask I zeroes the masked regions in the masked run only, or the row at each masked region's index (one "
        "early: row 0 is the reader's global token) in every run, with the authors' second global token"),
    "vlbert_image_box": Switch(
        10, ("whole", "none"), "encoder option of VL-BERT",
        "the whole-image box first (its feature on the caption tokens), or none: the boxes in the authors' sort "
        "order, the first box's feature on the caption tokens"),
    "vlbert_box_padding": Switch(
        11, ("masked", "attended"), "encoder option of VL-BERT",
        "padding boxes masked, or zero boxes taken as real (boxes[..., 0] > -1.5), up to seq_len"),
    "vlbert_image_mask": Switch(
        12, ("learned", "zeroed"), "encoder option of VL-BERT",
        "mask I: the learned mask embeddings on the masked boxes, or the row at each masked region's index "
        "zeroed, coordinates included, no mask embedding"),
    "label_offset": Switch(
        13, (0, -1), "embedding job: mask I's region labels, LXMERT on a TSV-read store (label_offset())",
        "0: each region's stored label (objects_id counts from the first object class); -1: the class before "
        "it, as the authors looked objects_id up in ['background'] + the object vocabulary"),
    "region_source": Switch(
        14, ("detector", "released"), "embedding job: the region store a model reads (region_store())",
        "detector: the store of the model entry's detector; released: the store read from the TSV file that "
        "the entry's released_regions names for the dataset (LXMERT on COCO: its val2014_obj36.tsv)"),
}
PRESETS = {name: {k: s.values[i] for k, s in SWITCHES.items()} for i, name in enumerate(("paper", "authors"))}


def resolve(protocol):
    """{switch: value} of ``protocol``: a preset name, or a mapping with ``preset`` and any switches
    to override. Unknown presets, switches and values are errors naming them."""
    if isinstance(protocol, str):
        protocol = {"preset": protocol}
    if not isinstance(protocol, dict) or "preset" not in protocol:
        raise InputError("protocol", f"expected a preset name ({', '.join(PRESETS)}) or a mapping with 'preset'")
    preset = protocol["preset"]
    if preset not in PRESETS:
        raise InputError(f"protocol preset '{preset}'", f"must be one of {', '.join(PRESETS)}")
    out = dict(PRESETS[preset])
    for key, value in protocol.items():
        if key == "preset":
            continue
        if key not in SWITCHES:
            raise InputError(f"protocol switch '{key}'", f"unknown (switches: {', '.join(SWITCHES)})")
        if value not in SWITCHES[key].values:
            raise InputError(f"protocol switch '{key}'", f"is {value!r}; must be one of "
                                                         f"{', '.join(map(repr, SWITCHES[key].values))}")
        out[key] = value
    return out


def encoder_options(switches, family, config=None):
    """Options of the vision-language encoder entry of ``family`` (vlbias.models.vl): token_mask for
    every family, ws_vector for those that give more than one W/S vector (the two-stream ones), the
    switches the family declares as its ``feeds`` (ViLBERT's, VL-BERT's: vlbias.models.families).
    ``config``, the entry's model config: an end-to-end VL-BERT (``image_feat_precomputed: false``)
    gets no feed switch, being fed as VL-BERT under every protocol (the authors' loader read
    precomputed features only; the embedding file's ``info`` records the feed)."""
    options = {"token_mask": switches["token_mask"]}
    if len(ws_vectors(family)) > 1:
        options["ws_vector"] = switches["ws_vector"]
    if not (family == "vlbert" and (config or {}).get("image_feat_precomputed") is False):
        options.update({name: switches[name] for name in feeds(family)})
    return options


def region_store(switches, spec, dataset):
    """The region store (a regions/detectors or regions/tsv entry) a grounded model entry ``spec``
    reads on ``dataset`` (row 14): its `released_regions` source under `released`, where it names one."""
    released = (spec.get("released_regions") or {}).get(dataset)
    return released if released and switches["region_source"] == "released" else spec["detector"]


def label_offset(switches, family, store_attrs):
    """The offset mask I reads region labels with (row 13; vlbias.visual.regions_with_labels): the
    switch's value for LXMERT on a store read from a TSV, whose class ids are the released objects_id
    the authors' LXMERT loader misread; 0 elsewhere (no public code settles how the authors read other
    features: docs/grounded.md)."""
    return switches["label_offset"] if family == "lxmert" and store_attrs.get("adapter") == "tsv" else 0
