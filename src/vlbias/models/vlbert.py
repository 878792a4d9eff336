"""VL-BERT (Su et al. 2020): one BERT over the caption and the image's regions, each token with a visual feature.

Config entry (``adapter: vlbert``): the keys of vlbias.models.vl, and
    seq_len   caption tokens plus boxes (the whole-image box included) VL-BERT reads, as its
              pre-training data loader (DATASET.SEQ_LEN, default 64; Ross et al.'s loader the same):
              while longer, a box is dropped from the end if boxes outnumber tokens, else a token;
              a caption that would lose a token is an error instead (it would lose words)
    authors_batch_size   pairs per batch of Ross et al.'s loader, for ``vlbert_box_padding:
              attended`` (default 256: their config, configs/vlbert_google_images.yml:4, over one GPU;
              256 / n for a run on n GPUs)
    scales    [min, max] (SCALES, default [600, 1000]): images are resized as VL-BERT resized
              them (shorter side to min unless the longer would exceed max); box positions are
              taken in that frame, and the end-to-end model runs its backbone on it
``config`` keys (VLBertConfig) default to the base pre-trained models' (cfgs/pretrain/base_*.yaml);
``image_feat_precomputed`` selects the checkpoint family:
    true   ``vl-bert-base-prec.model`` (the default; the model of Srinivasan & Bisk): the region
           features are the precomputed bottom-up-attention ones (2048-d, the ``bua`` detector),
           the Fast R-CNN being frozen during its pre-training. Each entry needs ``features``,
           ``boxes_norm`` and ``image_size``.
    false  ``vl-bert-base-e2e.model``: the model computes the region features itself, with its
           own Fast R-CNN head (ResNet-101 to res4, RoIAlign 14x14 on the boxes, the dilated res5
           and a mean pool) over the resized image; ``needs_pixels`` is then True and each entry
           needs ``image`` (uint8 RGB), ``boxes_norm`` and ``is_person`` (for masking).

Weights: VL-BERT's checkpoints are {"state_dict": (DataParallel "module."-prefixed names), "optimizer": ...},
read with ``weights_only=True`` (tensors, numbers and containers only) and loaded strictly by
name; the published ones are on Google Drive (CHECKPOINTS): download by hand, give ``checkpoint:``.

Input, as VL-BERT's pre-training fed it: [CLS] caption [SEP], then one token per box, then [END].
The boxes are the whole image (0, 0, w-1, h-1) first, then the region store's in its order (VL-BERT
sorted them by their highest class probability, background included, which a store does not keep;
object tokens share one position, so the order acts only where ``seq_len`` cuts the list), in the
resized image's pixels, clamped to it. A box's visual feature is
obj_downsample(sin/cos embedding of its position, its 2048-d region feature); the whole-image box's
region feature is the mean of the region features (precomputed) or its own RoI feature (end to
end). Every caption token carries the whole-image box's visual feature. Object tokens share the
position after the text and the segment 2.

Image masking, as VL-BERT's masked-region pre-training: a masked box's word embedding becomes the
learned ``object_mask_word_embedding``; precomputed: its region feature becomes the learned
``object_mask_visual_embedding`` and the whole-image feature the mean of the unmasked regions
only; end to end: its pixels are set to zero after normalisation (the pixel mean). No visual input
is VL-BERT's text-only pre-training input (its text corpora): no box at all, every caption token
carrying the learned ``aux_text_visual_embedding`` ([CLS] caption [SEP] [END]). The text mask is
VL-BERT's ``input_ids > 0``: [PAD]s that ``token_mask: word`` appends are not attended.

Fed as Ross et al.'s loader fed it (precomputed features only; protocol switches, docs/grounded.md
rows 10-12; the first value is VL-BERT's own, the default):
    vlbert_image_box    ``whole`` or ``none``: no whole-image box (their add_image_as_a_box is
                        False, scripts/dataloaders/vlbert/bias_dataset.py:34), so the caption tokens
                        carry the first box's feature; the boxes in the order of their sort
                        (lines 114-117: ``argsort`` of the ``classes`` field read as float32 scores,
                        descending; for class ids stored as float64, as the ids the region store's
                        ``class_ids`` + 1 name in ['background'] + vocabulary, that is by class id,
                        each id's upper half-word the larger), in the image's own pixels (their
                        im_info has scale 1: nothing is resized), clamped to it. Needs ``class_ids``.
    vlbert_box_padding  ``masked`` or ``attended``: their collate pads every image's boxes with zero
                        rows to the longest box list of its batch (bias_dataset.py:270-272) and the
                        model takes every box with x1 > -1.5 as real (resnet_vlbert_for_pretraining.py
                        :74), so an image with fewer boxes than its batch's longest attends to zero
                        boxes (at (0, 0, 0, 0), of its image's size). Their batches: a role's pairs in
                        their dataset's order (the stimulus' images in file order, each with its
                        captions: bias_dataset.py:85-97, as ``GroundedStimulus.pairs``), ``shuffle``
                        off, ``authors_batch_size`` at a time (their config's batch_size 256,
                        configs/vlbert_*_images.yml:4, over torch.cuda.device_count() GPUs,
                        bias_dataloader.py:36 and main.py:35: one GPU assumed); each image's box list
                        as their __getitem__ cut it beside its caption (lines 163-180, ``seq_len``).
                        ``in_authors_batches`` records each pair's batch length in its entry
                        (``Visual.batch_boxes``); pairs given without it are taken as one role's
                        pairs in their order (an ``embed`` call's list)
    vlbert_image_mask   ``learned`` or ``zeroed``: mask I zeroes the whole box row, coordinates
                        included (dataset_wrappers.py:164-174), with no learned mask embedding (the
                        visual one is commented out, resnet_vlbert_for_pretraining.py:83; the word one
                        dropped, line 37); the row zeroed is the one at the masked region's index
                        in the region list, whatever box the sort of ``vlbert_image_box: none`` put
                        there (labels not reordered, bias_dataset.py:161 vs 115-117), after the
                        whole-image box if there is one (whose feature is then the mean of the rows as fed)

The network is vlbias.models.modeling_vlbert (random weights: see there); this module feeds it.
"""

import copy
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import torch
from PIL import Image

from vlbias.errors import InputError
from vlbias.images.blob import PIXEL_MEANS_BGR
from vlbias.models import register
from vlbias.models.modeling_vlbert import FEATURE_DIM, VLBertConfig, VLBertForPretraining
from vlbias.models.tokenization import encode_text
from vlbias.models.vl import LENGTH_BUCKET, VLEncoder
from vlbias.visual import Visual, visual_field

CHECKPOINTS = {
    "vl-bert-base-prec (precomputed features; Srinivasan & Bisk's model)":
        "https://drive.google.com/file/d/1YBFsyoWwz83VPzbimKymSBxE37gYtfgh/view",
    "vl-bert-base-e2e (image_feat_precomputed: false)":
        "https://drive.google.com/file/d/1jjV1ARYMs37tOaBalhJmwq7LcWeMai96/view",
}


def resized_size(width, height, min_size, max_size):
    """VL-BERT's Resize.get_size: (w, h) with the shorter side min_size unless the longer would exceed max_size."""
    size = min_size
    if max(width, height) / min(width, height) * size > max_size:
        size = int(max_size * min(width, height) / max(width, height))
    if (width <= height and width == size) or (height <= width and height == size):
        return width, height
    if width < height:
        return size, int(size * height / width)
    return int(size * width / height), size


@register("vlbert")
class VLBertEncoder(VLEncoder):
    family = "vlbert"
    original_checkpoints = CHECKPOINTS
    config_class = VLBertConfig
    model_class = VLBertForPretraining
    base_config = {}  # VLBertConfig's defaults are the base models'
    feature_dim_key = "visual_feature_size"
    uses_boxes = True
    supports_image_masking = True
    no_image = ("text only, as its text-corpus pre-training: no box, every token's visual feature the learned "
                "aux_text_visual_embedding ([CLS] caption [SEP] [END])")

    def __init__(self, spec):
        super().__init__(spec)
        # the object tokens and [END] take the two positions after the caption's
        limit = self.model.config.max_position_embeddings - 2
        if self.max_length > limit:
            if spec.get("max_length"):
                raise InputError(f"max_length {self.max_length}", f"VL-BERT reads at most {limit} caption tokens "
                                                                  "(its boxes and [END] take two more positions)")
            self.max_length = self.info["max_length"] = limit
        self.needs_pixels = not self.model.config.image_feat_precomputed
        authors = [k for k, v in self.feed.items() if v != self.feed_options[k][0]]
        if self.needs_pixels and authors:
            raise InputError(", ".join(authors), "Ross et al.'s loader fed precomputed features only: "
                                                 "not with image_feat_precomputed false")
        self.seq_len = spec["seq_len"]
        if isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len < 3:
            raise InputError("seq_len", f"must be an integer of at least 3, got {self.seq_len!r}")
        self.authors_batch_size = spec["authors_batch_size"]
        if (isinstance(self.authors_batch_size, bool) or not isinstance(self.authors_batch_size, int)
                or self.authors_batch_size < 1):
            raise InputError("authors_batch_size", f"must be a positive integer, got {self.authors_batch_size!r}")
        self.batch_dependent = self.feed["vlbert_box_padding"] == "attended"
        self.scales = spec["scales"]
        if (not isinstance(self.scales, (list, tuple)) or len(self.scales) != 2
                or not all(isinstance(s, int) and s > 0 for s in self.scales) or self.scales[0] > self.scales[1]):
            raise InputError("scales", f"expected [min, max] pixel sizes, min <= max, got {self.scales!r}")
        self.image_masking = (
            "the box's word embedding set to object_mask_word_embedding; " +
            ("its region feature to object_mask_visual_embedding and the whole-image feature the mean of the "
             "unmasked regions" if not self.needs_pixels else "its pixels set to the pixel mean")
            + " (VL-BERT's masked-region pre-training)")
        self.info.update({"image_masking": self.image_masking, "seq_len": self.seq_len, "scales": list(self.scales),
                          "needs_pixels": self.needs_pixels,
                          "authors_batch_size": self.authors_batch_size,
                          "output": "hidden states of the caption tokens; W/S: [CLS], C: first sub-token of the word"})

    def _image(self, entry, index, mask):
        """One caption's boxes (1+k, 6) (whole image first), masked flags (1+k,), and its region
        features (1+k, 2048) or normalised pixels (3, h, w) on the device; None for no visual input."""
        if entry is None:
            return None
        where = f"regions[{index}]"
        boxes = visual_field(entry, "boxes_norm")
        if boxes is None or boxes.ndim != 2 or boxes.shape[1] != 4 or not len(boxes):
            raise InputError(where, "expected boxes_norm of shape (k, 4), k >= 1 (pass None for no image)")
        if not (np.isfinite(boxes).all() and boxes.min() >= -1e-3 and boxes.max() <= 1 + 1e-3):
            raise InputError(where, "boxes_norm must be boxes divided by the image size, in [0, 1]")
        k = len(boxes)
        pixels = visual_field(entry, "image") if self.needs_pixels else None
        if self.needs_pixels and (pixels is None or pixels.dtype != np.uint8 or pixels.ndim != 3
                                  or pixels.shape[2] != 3):
            raise InputError(where, "this VL-BERT computes its region features: it needs image, uint8 RGB (H, W, 3)")
        size = visual_field(entry, "image_size")
        if size is None and pixels is not None:
            size = np.array(pixels.shape[:2])
        if size is None or size.shape != (2,) or size.min() < 1 or (pixels is not None and
                                                                     tuple(size) != pixels.shape[:2]):
            raise InputError(where, "needs image_size (height, width) in pixels, that of its image")
        h, w = (int(v) for v in size)
        whole = self.feed["vlbert_image_box"] == "whole"
        order = np.arange(k)
        if not whole:  # Ross et al.'s sort: the class-id bytes read as float32 scores (bias_dataset.py:111-117)
            ids = visual_field(entry, "class_ids")
            if ids is None or ids.shape != (k,):
                raise InputError(where, f"vlbert_image_box 'none' orders boxes by class_ids, int of shape ({k},)")
            order = np.argsort((ids + 1).astype(np.float64).view(np.float32).reshape(k, 2).max(axis=1))[::-1]
        n, first = k + whole, int(whole)
        masked, zeroed = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        if mask == "I":
            person = visual_field(entry, "is_person")
            if person is None or person.shape != (k,) or person.dtype != bool:
                raise InputError(where, f"image masking needs is_person, bool of shape ({k},)")
            if self.feed["vlbert_image_mask"] == "learned":
                masked[first:] = person[order]
            else:  # the row at the region's index, not where the sort moved it (dataset_wrappers.py:168-173)
                zeroed[first:] = person
        xyxy = (boxes[order] * [w, h, w, h]).astype(np.float32)
        if whole:  # the whole image (0, 0, w-1, h-1) first, in original pixels; then resized as VL-BERT
            w1, h1 = resized_size(w, h, *self.scales)
            xyxy = np.concatenate([np.float32([[0, 0, w - 1, h - 1]]), xyxy])
            xyxy = xyxy * np.array([w1 / w, h1 / h, w1 / w, h1 / h], dtype=np.float32)
        else:  # their im_info: scale 1
            w1, h1 = w, h
        xyxy[:, [0, 2]] = xyxy[:, [0, 2]].clip(0, w1 - 1)
        xyxy[:, [1, 3]] = xyxy[:, [1, 3]].clip(0, h1 - 1)
        xyxy[zeroed] = 0
        out_boxes = np.concatenate([xyxy, np.broadcast_to(np.float32([w1, h1]), (n, 2))], axis=1)
        if self.needs_pixels:
            return out_boxes, masked, self._pixels(pixels, (w1, h1), xyxy[masked]).to(self.device)
        feats = visual_field(entry, "features")
        if feats is None or feats.shape != (k, FEATURE_DIM) or not np.isfinite(feats).all():
            raise InputError(where, f"expected finite features of shape ({k}, {FEATURE_DIM}), got "
                                    f"{None if feats is None else feats.shape}")
        feats = feats[order].astype(np.float32)
        feats[zeroed[first:]] = 0
        if not whole:
            return out_boxes, masked, feats
        kept = feats[~masked[1:]]
        # the mean of the regions; with some masked, that of the others as VL-BERT's pre-training data loader
        # computed it (its 1e-5 keeps an image whose regions are all masked at zeros)
        mean = kept.sum(axis=0) / (len(kept) + 1e-5) if masked.any() else kept.mean(axis=0)
        return out_boxes, masked, np.concatenate([mean[None], feats])

    @staticmethod
    def _pixels(rgb, size, blank):
        """VL-BERT's image transform (PIL bilinear resize to ``size`` (w, h), BGR x 255 minus the caffe
        pixel mean) with the ``blank`` boxes' pixels set to 0 (its masked-region pre-training)."""
        image = np.asarray(Image.fromarray(rgb).resize(size, Image.BILINEAR), dtype=np.float32) / 255
        image = torch.from_numpy(image).permute(2, 0, 1)[[2, 1, 0]] * 255
        image = image - torch.tensor(PIXEL_MEANS_BGR).view(3, 1, 1)
        for x1, y1, x2, y2 in blank:
            image[:, int(y1):int(y2) + 1, int(x1):int(x2) + 1] = 0
        return image

    def in_authors_batches(self, captions, regions):
        """Under ``vlbert_box_padding: attended``, each pair's entry with ``batch_boxes``: the longest
        box list of its batch in Ross et al.'s loader (module docstring), the pairs given in its order;
        its key, that number. Otherwise the entries unchanged."""
        if not self.batch_dependent:
            return super().in_authors_batches(captions, regions)
        lengths = [len(ids) for ids in self.tokenizer(list(captions))["input_ids"]]  # with [CLS] and [SEP]
        whole = self.feed["vlbert_image_box"] == "whole"
        kept = [0 if entry is None else _boxes_kept(n, len(visual_field(entry, "boxes_norm")) + whole, self.seq_len) or 0
                for n, entry in zip(lengths, regions)]
        size = self.authors_batch_size
        longest = [max(kept[i - i % size:i - i % size + size]) for i in range(len(kept))]
        entries = [None if entry is None else _with_batch_boxes(entry, k) for entry, k in zip(regions, longest)]
        return entries, [None if entry is None else k for entry, k in zip(regions, longest)]

    def _check(self, captions, regions, mask, mask_terms):
        """Also: entries without ``batch_boxes`` (attended padding) are taken as one role's pairs in the
        authors' order: the call's list."""
        captions, regions = super()._check(captions, regions, mask, mask_terms)
        if self.batch_dependent and any(e is not None and visual_field(e, "batch_boxes") is None for e in regions):
            regions = [e if e is None or visual_field(e, "batch_boxes") is not None else f
                       for e, f in zip(regions, self.in_authors_batches(captions, regions)[0])]
        return captions, regions

    def _prepared(self, entry, index, mask):
        """``_image`` of one entry, end to end with the RoI features of all its boxes in place of the
        pixels (the backbone and the res5 head once per image: a caption reads the boxes it keeps)."""
        boxes, masked, visual = self._image(entry, index, mask)
        if self.needs_pixels:
            rois = torch.from_numpy(boxes[:, :4]).to(self.device)
            visual = self.model.image_feature_extractor.region_features([visual], [rois])
        return boxes, masked, visual

    def _shape(self, length, entry):
        """Key: the joint sequence's length (text, object tokens, [END]) rounded up to a LENGTH_BUCKET
        multiple, the length its batch pads it to (``_joint_length``); rows: its object tokens (the
        boxes kept beside a caption of ``length`` tokens, or its authors' batch's under attended padding)."""
        boxes = self._object_tokens(length, entry)
        return (self._joint_length(length, boxes),), (self._joint_length(length, boxes), boxes)

    def _object_tokens(self, length, entry):
        if entry is None:
            return 0
        padded = visual_field(entry, "batch_boxes")
        if padded is not None:
            return int(padded)
        n = len(visual_field(entry, "boxes_norm")) + (self.feed["vlbert_image_box"] == "whole")
        return _boxes_kept(length, n, self.seq_len) or 0

    @staticmethod
    def _joint_length(length, boxes):
        """The length a pair's joint sequence is padded to: its own rounded up to a LENGTH_BUCKET multiple,
        whatever it is batched with (its objects follow its text, packed: a text's padding moves them)."""
        return -(-(length + boxes + 1) // LENGTH_BUCKET) * LENGTH_BUCKET

    def _batch(self, captions, regions, index, mask, mask_terms, words):
        """(TextBatch, boxes (b,K,6), box mask (b,K), masked (b,K), region features (b,K,2048), the joint
        sequence's padded length)."""
        text = encode_text(self.tokenizer, captions, self.max_length, mask_terms, words, self.token_mask,
                           LENGTH_BUCKET)
        lengths = text.attention_mask.sum(1).tolist()
        images = []  # an image read by several captions is prepared (and end to end run) once: _once
        for j, (i, entry) in enumerate(zip(index, regions)):
            image = None if entry is None else self._once(entry, mask, lambda i=i, entry=entry:
                                                          self._prepared(entry, i, mask))
            if image is not None:
                keep = _boxes_kept(lengths[j], len(image[0]), self.seq_len)
                if keep is None:
                    raise InputError(f"caption '{captions[j]}'", f"with {len(image[0])} boxes, is too long for "
                                                                 f"seq_len {self.seq_len} ({lengths[j]} tokens)")
                image = (image[0][:keep], image[1][:keep], image[2][:keep])
                if self.batch_dependent:  # zero boxes (of the image's size) to the batch's longest, taken as real
                    pad = int(visual_field(entry, "batch_boxes")) - keep
                    if pad < 0:
                        raise InputError(f"regions[{i}]", f"batch_boxes {pad + keep} is fewer than the "
                                                          f"{keep} boxes the image keeps beside its caption")
                    image = (np.concatenate([image[0], np.zeros((pad, 6), np.float32) + [0, 0, 0, 0, *image[0][0, 4:]]]),
                             np.concatenate([image[1], np.zeros(pad, bool)]),
                             np.concatenate([image[2], np.zeros((pad, FEATURE_DIM), np.float32)]))
            images.append(image)
        k = max((len(im[0]) for im in images if im is not None), default=0)
        boxes = np.zeros((len(images), k, 6), dtype=np.float32)
        box_mask = np.zeros((len(images), k), dtype=bool)
        masked = np.zeros((len(images), k), dtype=bool)
        feats = torch.zeros((len(images), k, FEATURE_DIM), device=self.device)
        for j, im in enumerate(images):
            if im is not None:
                n = len(im[0])
                boxes[j, :n], box_mask[j, :n], masked[j, :n] = im[0], True, im[1]
                feats[j, :n] = torch.as_tensor(im[2], device=self.device)
        text.input_ids = text.input_ids.to(self.device)
        text.attention_mask = text.attention_mask.to(self.device)
        on = lambda a: torch.from_numpy(a).to(self.device)  # noqa: E731
        joint = max(self._joint_length(n, 0 if im is None else len(im[0])) for n, im in zip(lengths, images))
        return text, on(boxes), on(box_mask), on(masked), feats, joint

    def _language_states(self, text, boxes, box_mask, masked, features, joint):
        text_mask = text.attention_mask.bool() & (text.input_ids > 0)  # VL-BERT's text mask: ids > 0
        states, _ = self.model.encode(text.input_ids, text_mask, boxes, box_mask, masked, features=features,
                                      length=joint)
        return states

    def _lm_head(self, states):
        return self.model.vlbert.mlm_head.predictions(states)


def _with_batch_boxes(entry, k):
    """A regions entry (Visual, mapping or object) with ``batch_boxes`` k."""
    if isinstance(entry, Visual):
        return replace(entry, batch_boxes=k)
    if isinstance(entry, Mapping):
        return {**entry, "batch_boxes": k}
    entry = copy.copy(entry)
    entry.batch_boxes = k
    return entry


def _boxes_kept(n_text, n_boxes, seq_len):
    """Boxes kept by VL-BERT's truncation of text + boxes to ``seq_len``; None if text would be cut."""
    text, boxes = n_text, n_boxes
    while text + boxes > seq_len and text > 0 and boxes > 0:
        if boxes > text:
            boxes -= 1
        else:
            text -= 1
    return max(boxes, 1) if max(text, 2) >= n_text else None
