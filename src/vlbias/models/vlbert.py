"""VL-BERT (Su et al. 2020): one BERT over the caption and the image's regions, each token with a visual feature.

Config entry (``adapter: vlbert``): the keys of vlbias.models.vl, and
    seq_len   caption tokens plus boxes (the whole-image box included) VL-BERT reads, as its
              pre-training data loader (DATASET.SEQ_LEN, default 64; Ross et al.'s loader the same):
              while longer, a box is dropped from the end if boxes outnumber tokens, else a token;
              a caption that would lose a token is an error instead (it would lose words)
    authors_batch_size   pairs per batch of Ross et al.'s loader, for ``vlbert_box_padding:
              attended`` (default 256: their config over one GPU; 256 / n for a run on n GPUs)
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

Random weights (``weights: random``) initialise as the original, except the two visual LayerNorms,
whose weights start at ``initializer_range`` (the original's 0 would make a random model ignore the
image), and the ResNet, whose convolutions are scaled down so that activations stay moderate
without trained batch statistics.
"""

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.nn import functional as F
from torchvision.models.resnet import Bottleneck
from torchvision.ops import roi_align

from vlbias.errors import InputError
from vlbias.models import register
from vlbias.models.bert_layers import LN_EPS, Layer, LMPredictionHead, additive_mask, init_weights
from vlbias.models.vl import Visual, VLEncoder, _field, encode_text
from vlbias.regions.bua import PIXEL_MEAN_BGR

CHECKPOINTS = {
    "vl-bert-base-prec (precomputed features; Srinivasan & Bisk's model)":
        "https://drive.google.com/file/d/1YBFsyoWwz83VPzbimKymSBxE37gYtfgh/view",
    "vl-bert-base-e2e (image_feat_precomputed: false)":
        "https://drive.google.com/file/d/1jjV1ARYMs37tOaBalhJmwq7LcWeMai96/view",
}
FEATURE_DIM = 2048       # the bottom-up-attention / ResNet-101 res5 region features
COORD_DIM = 256          # sin and cos of each of the 4 box coordinates at 256 frequencies: 2048 values
OBJECT_SEGMENT = 2       # the token type of object tokens and [END]
POOL = 14                # RoIAlign output (the res5 head keeps it: stride 1, dilation 2)
AUTHORS_BATCH_SIZE = 256  # Ross et al.'s VL-BERT batch_size (configs/vlbert_google_images.yml:4), one GPU


@dataclass
class VLBertConfig:
    """VL-BERT's NETWORK.VLBERT keys (visual_size = hidden_size, visual_ln, no pooler, as every
    published model) and NETWORK.IMAGE_FEAT_PRECOMPUTED; defaults are the base pre-trained models'."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 3
    initializer_range: float = 0.02
    visual_region_classes: int = 1601
    image_feat_precomputed: bool = True

    @property
    def visual_feature_size(self):
        return FEATURE_DIM

    def to_dict(self):
        return asdict(self)


def coordinate_embeddings(boxes, dim=COORD_DIM):
    """(n, 6) boxes x1, y1, x2, y2 and the image's w, h -> (n, 4 * 2 * dim) sin/cos position features.

    The box's centre and size in percent of the image, each through sin and cos at ``dim``
    wavelengths 1000^(i/dim) (VL-BERT's common/utils/bbox.py).
    """
    w, h = boxes[:, 4], boxes[:, 5]
    centre_size = torch.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2,
                               boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]], dim=1)
    pos = centre_size / torch.stack([w, h, w, h], dim=1) * 100
    wavelengths = 1000 ** (torch.arange(dim, dtype=boxes.dtype, device=boxes.device) / dim)
    angles = pos[:, :, None] / wavelengths
    return torch.cat([angles.sin(), angles.cos()], dim=-1).flatten(1)


def resnet_stage(inplanes, planes, blocks, stride, dilation=1):
    """A ResNet stage of torchvision Bottlenecks with the stride in the first 1x1 convolution (caffe's)."""
    downsample = None
    if stride != 1 or inplanes != planes * Bottleneck.expansion:
        downsample = nn.Sequential(nn.Conv2d(inplanes, planes * Bottleneck.expansion, 1, stride=stride, bias=False),
                                   nn.BatchNorm2d(planes * Bottleneck.expansion))
    first = Bottleneck(inplanes, planes, stride, downsample, dilation=dilation)
    first.conv1.stride, first.conv2.stride = (stride, stride), (1, 1)  # stride_in_1x1
    return nn.Sequential(first, *(Bottleneck(planes * Bottleneck.expansion, planes, dilation=dilation)
                                  for _ in range(blocks - 1)))


class ResNetC4(nn.Module):
    """ResNet-101 to res4 (``body4``, stride 16), torchvision's names: VL-BERT's image backbone."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = resnet_stage(64, 64, 3, 1)
        self.layer2 = resnet_stage(256, 128, 4, 2)
        self.layer3 = resnet_stage(512, 256, 23, 2)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        return self.layer3(self.layer2(self.layer1(x)))


class FastRCNN(nn.Module):
    """A box's visual feature: obj_downsample(position embedding, region feature) (common/fast_rcnn.py)."""

    def __init__(self, config):
        super().__init__()
        if not config.image_feat_precomputed:
            self.backbone = ResNetC4()
            # res5: stride 1, dilation 2; ``head`` holds the same module (the checkpoints name it twice)
            self.roi_head_feature_extractor = resnet_stage(1024, 512, 3, 1, dilation=2)
            self.head = nn.Sequential(self.roi_head_feature_extractor, nn.AvgPool2d(POOL, stride=1), nn.Flatten())
        # index 0 is the original's dropout, inert at inference
        self.obj_downsample = nn.Sequential(nn.Identity(), nn.Linear(2 * FEATURE_DIM, config.hidden_size),
                                            nn.ReLU())

    def region_features(self, images, boxes):
        """Per image (3, h, w) normalised pixels and its (n, 4) boxes: (sum n, 2048) RoI features.

        Each image runs through the backbone at its own size (VL-BERT padded a batch to its largest
        image, which changes the features near the padded borders: a result would depend on the batch),
        and once however many captions of the batch share it (the same tensor).
        """
        feats, done = [], {}
        for image, b in zip(images, boxes):
            if id(image) not in done:
                done[id(image)] = self.backbone(image[None])
            body4 = done[id(image)]
            rois = torch.cat([b.new_zeros((len(b), 1)), b], dim=1)
            feats.append(self.head(roi_align(body4, rois, (POOL, POOL), 1.0 / 16, sampling_ratio=1, aligned=False)))
        return torch.cat(feats)

    def forward(self, region_features, boxes):
        """(n, 2048) region features, (n, 6) boxes with the image size -> (n, hidden)."""
        return self.obj_downsample(torch.cat([coordinate_embeddings(boxes), region_features], dim=-1))


class Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList(Layer(config.hidden_size, config.num_attention_heads, config.intermediate_size)
                                   for _ in range(config.num_hidden_layers))

    def forward(self, x, mask):
        for layer in self.layer:
            x = layer(x, mask)
        return x


class MLMHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.predictions = LMPredictionHead(config.hidden_size, config.vocab_size)


class MVRCHeadTransform(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, states):
        return F.gelu(self.dense(states))


class MVRCHead(nn.Module):
    """Masked-region classification: the Visual Genome class (1601 with background) of an object token."""

    def __init__(self, config):
        super().__init__()
        self.transform = MVRCHeadTransform(config)
        self.region_cls_pred = nn.Linear(config.hidden_size, config.visual_region_classes)

    def forward(self, states):
        return self.region_cls_pred(self.transform(states))


class VisualLinguisticBert(nn.Module):
    """VisualLinguisticBertForPretraining (common/visual_linguistic_bert.py) with its MLM and MVRC heads."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, h)
        self.end_embedding = nn.Embedding(1, h)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, h)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, h)
        self.embedding_LayerNorm = nn.LayerNorm(h, eps=LN_EPS)
        self.visual_ln_text = nn.LayerNorm(h, eps=LN_EPS)
        self.visual_ln_object = nn.LayerNorm(h, eps=LN_EPS)
        self.encoder = Encoder(config)
        self.mlm_head = MLMHead(config)
        self.mvrc_head = MVRCHead(config)

    def forward(self, input_ids, text_mask, text_visual, object_visual, object_linguistic, object_mask):
        """Final states of the joint sequence: text (b, L, hidden), objects (b, K, hidden).

        ``input_ids`` (b, L) and ``text_mask`` (b, L) bool, padded at the end; ``text_visual`` (b, L,
        hidden) each token's visual feature; ``object_visual``, ``object_linguistic`` (b, K, hidden)
        and ``object_mask`` (b, K) bool, padded at the end. The sequence is each row's text, its
        objects and [END], packed without gaps (VisualLinguisticBert.embedding).
        """
        b = len(input_ids)
        text = self.word_embeddings(input_ids) + self.visual_ln_text(text_visual)
        objects = object_linguistic + self.visual_ln_object(object_visual)
        text_end = text_mask.sum(1, keepdim=True)
        object_end = text_end + object_mask.sum(1, keepdim=True)
        length = int(object_end.max()) + 1
        grid = torch.arange(length, device=input_ids.device).expand(b, length)
        is_text, is_object, is_end = grid < text_end, (grid >= text_end) & (grid < object_end), grid == object_end
        x = text.new_zeros((b, length, text.shape[-1]))
        x[is_text] = text[text_mask]
        x[is_object] = objects[object_mask]
        x[is_end] = self.end_embedding.weight[0]
        segments = torch.where(is_text, 0, OBJECT_SEGMENT)  # caption tokens are segment 0
        # objects share the position after the text, [END] the next (obj_pos_id_relative)
        positions = torch.where(is_text, grid, torch.where(is_object, text_end, text_end + 1))
        x = self.embedding_LayerNorm(x + self.position_embeddings(positions) + self.token_type_embeddings(segments))
        x = self.encoder(x, additive_mask(grid <= object_end, x.dtype))
        object_states = x.new_zeros(object_visual.shape)
        object_states[object_mask] = x[is_object]
        return x[:, :input_ids.shape[1]], object_states


class VLBertForPretraining(nn.Module):
    """ResNetVLBERTForPretrainingMultitask (pretrain/modules/), the module of every published model."""

    _tied_weights_keys = {"vlbert.mlm_head.predictions.decoder.weight": "vlbert.word_embeddings.weight"}

    def __init__(self, config):
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.image_feature_extractor = FastRCNN(config)
        self.object_linguistic_embeddings = nn.Embedding(1, h)
        if config.image_feat_precomputed:  # end to end, a masked region's pixels are blanked instead
            self.object_mask_visual_embedding = nn.Embedding(1, FEATURE_DIM)
        self.object_mask_word_embedding = nn.Embedding(1, h)
        self.aux_text_visual_embedding = nn.Embedding(1, h)
        self.vlbert = VisualLinguisticBert(config)
        self.apply(lambda m: init_weights(m, config.initializer_range))
        # the original fills the visual LayerNorms' weights with 0 (a random model would be blind); the
        # scale of the word embeddings instead, so that a random model reads both
        for ln in (self.vlbert.visual_ln_text, self.vlbert.visual_ln_object):
            nn.init.constant_(ln.weight, config.initializer_range)
        self.vlbert.mlm_head.predictions.decoder.weight = self.vlbert.word_embeddings.weight
        if not config.image_feat_precomputed:
            _init_resnet(self.image_feature_extractor)

    def encode(self, input_ids, text_mask, boxes, box_mask, masked, features=None, images=None):
        """Final text (b, L, hidden) and object (b, K, hidden) states.

        ``boxes`` (b, K, 6): x1, y1, x2, y2 in the resized image's pixels and its w, h, the
        whole-image box first; ``box_mask`` (b, K) bool, a row without boxes is text only;
        ``masked`` (b, K) bool, masked regions. Region features: ``features`` (b, K, 2048)
        (precomputed), or ``images``, per row with boxes its (3, h, w) normalised pixels (end to end).
        """
        reps = boxes.new_zeros((*box_mask.shape, self.config.hidden_size))
        if box_mask.any():
            if self.config.image_feat_precomputed:
                region = torch.where(masked[box_mask][:, None], self.object_mask_visual_embedding.weight[0],
                                     features[box_mask])
            else:
                rows = box_mask.any(dim=1)
                region = self.image_feature_extractor.region_features(
                    images, [b[m, :4] for b, m in zip(boxes[rows], box_mask[rows])])
            reps[box_mask] = self.image_feature_extractor(region, boxes[box_mask])
        # every caption token sees the whole-image box's feature; a text-only row the text-corpus embedding
        text_visual = self.aux_text_visual_embedding.weight[0].expand(len(input_ids), -1)
        if box_mask.shape[1]:
            text_visual = torch.where(box_mask[:, :1], reps[:, 0], text_visual)
        text_visual = text_visual[:, None].expand(-1, input_ids.shape[1], -1)
        linguistic = torch.where(masked[..., None], self.object_mask_word_embedding.weight[0],
                                 self.object_linguistic_embeddings.weight[0])
        return self.vlbert(input_ids, text_mask, text_visual, reps, linguistic, box_mask)

    def forward(self, input_ids, text_mask, boxes, box_mask, masked, features=None, images=None):
        """Masked-word logits (b, L, vocab_size) and masked-region class logits (b, K, visual_region_classes)."""
        text, objects = self.encode(input_ids, text_mask, boxes, box_mask, masked, features, images)
        return self.vlbert.mlm_head.predictions(text), self.vlbert.mvrc_head(objects)


def _init_resnet(module):
    """He-normal convolutions (fan out, as the original), halved so that 33 residual blocks keep
    moderate activations with batch norm at its initial statistics (mean 0, variance 1)."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            m.weight.data.mul_(0.5)


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
        self.seq_len = spec.get("seq_len", 64)
        if isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len < 3:
            raise InputError("seq_len", f"must be an integer of at least 3, got {self.seq_len!r}")
        self.authors_batch_size = spec.get("authors_batch_size", AUTHORS_BATCH_SIZE)
        if (isinstance(self.authors_batch_size, bool) or not isinstance(self.authors_batch_size, int)
                or self.authors_batch_size < 1):
            raise InputError("authors_batch_size", f"must be a positive integer, got {self.authors_batch_size!r}")
        self.batch_dependent = self.feed["vlbert_box_padding"] == "attended"
        self.scales = spec.get("scales", [600, 1000])
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
        boxes = _field(entry, "boxes_norm")
        if boxes is None or boxes.ndim != 2 or boxes.shape[1] != 4 or not len(boxes):
            raise InputError(where, "expected boxes_norm of shape (k, 4), k >= 1 (pass None for no image)")
        if not (np.isfinite(boxes).all() and boxes.min() >= -1e-3 and boxes.max() <= 1 + 1e-3):
            raise InputError(where, "boxes_norm must be boxes divided by the image size, in [0, 1]")
        k = len(boxes)
        pixels = _field(entry, "image") if self.needs_pixels else None
        if self.needs_pixels and (pixels is None or pixels.dtype != np.uint8 or pixels.ndim != 3
                                  or pixels.shape[2] != 3):
            raise InputError(where, "this VL-BERT computes its region features: it needs image, uint8 RGB (H, W, 3)")
        size = _field(entry, "image_size")
        if size is None and pixels is not None:
            size = np.array(pixels.shape[:2])
        if size is None or size.shape != (2,) or size.min() < 1 or (pixels is not None and
                                                                     tuple(size) != pixels.shape[:2]):
            raise InputError(where, "needs image_size (height, width) in pixels, that of its image")
        h, w = (int(v) for v in size)
        whole = self.feed["vlbert_image_box"] == "whole"
        order = np.arange(k)
        if not whole:  # Ross et al.'s sort: the class-id bytes read as float32 scores (bias_dataset.py:111-117)
            ids = _field(entry, "class_ids")
            if ids is None or ids.shape != (k,):
                raise InputError(where, f"vlbert_image_box 'none' orders boxes by class_ids, int of shape ({k},)")
            order = np.argsort((ids + 1).astype(np.float64).view(np.float32).reshape(k, 2).max(axis=1))[::-1]
        n, first = k + whole, int(whole)
        masked, zeroed = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        if mask == "I":
            person = _field(entry, "is_person")
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
        feats = _field(entry, "features")
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
        image = image - torch.tensor(PIXEL_MEAN_BGR).view(3, 1, 1)
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
        kept = [0 if entry is None else _boxes_kept(n, len(_field(entry, "boxes_norm")) + whole, self.seq_len) or 0
                for n, entry in zip(lengths, regions)]
        size = self.authors_batch_size
        longest = [max(kept[i - i % size:i - i % size + size]) for i in range(len(kept))]
        entries = [None if entry is None else _with_batch_boxes(entry, k) for entry, k in zip(regions, longest)]
        return entries, [None if entry is None else k for entry, k in zip(regions, longest)]

    def _check(self, captions, regions, mask, mask_terms):
        """Also: entries without ``batch_boxes`` (attended padding) are taken as one role's pairs in the
        authors' order: the call's list."""
        captions, regions = super()._check(captions, regions, mask, mask_terms)
        if self.batch_dependent and any(e is not None and _field(e, "batch_boxes") is None for e in regions):
            regions = [e if e is None or _field(e, "batch_boxes") is not None else f
                       for e, f in zip(regions, self.in_authors_batches(captions, regions)[0])]
        return captions, regions

    def _batch(self, captions, regions, first, mask, mask_terms, words):
        """(TextBatch, boxes (b,K,6), box mask (b,K), masked (b,K), features (b,K,2048) or per-image pixels)."""
        text = encode_text(self.tokenizer, captions, self.max_length, mask_terms, words, self.token_mask)
        lengths = text.attention_mask.sum(1).tolist()
        images, prepared = [], {}  # an image passed for several captions is prepared (and run) once
        for j, entry in enumerate(regions):
            if id(entry) not in prepared:
                prepared[id(entry)] = self._image(entry, first + j, mask)
            image = prepared[id(entry)]
            if image is not None:
                keep = _boxes_kept(lengths[j], len(image[0]), self.seq_len)
                if keep is None:
                    raise InputError(f"caption '{captions[j]}'", f"with {len(image[0])} boxes, is too long for "
                                                                 f"seq_len {self.seq_len} ({lengths[j]} tokens)")
                image = (image[0][:keep], image[1][:keep], image[2] if self.needs_pixels else image[2][:keep])
                if self.batch_dependent:  # zero boxes (of the image's size) to the batch's longest, taken as real
                    pad = int(_field(regions[j], "batch_boxes")) - keep
                    if pad < 0:
                        raise InputError(f"regions[{first + j}]", f"batch_boxes {pad + keep} is fewer than the "
                                                                  f"{keep} boxes the image keeps beside its caption")
                    image = (np.concatenate([image[0], np.zeros((pad, 6), np.float32) + [0, 0, 0, 0, *image[0][0, 4:]]]),
                             np.concatenate([image[1], np.zeros(pad, bool)]),
                             np.concatenate([image[2], np.zeros((pad, FEATURE_DIM), np.float32)]))
            images.append(image)
        k = max((len(im[0]) for im in images if im is not None), default=0)
        boxes = np.zeros((len(images), k, 6), dtype=np.float32)
        box_mask = np.zeros((len(images), k), dtype=bool)
        masked = np.zeros((len(images), k), dtype=bool)
        feats = None if self.needs_pixels else np.zeros((len(images), k, FEATURE_DIM), dtype=np.float32)
        for j, im in enumerate(images):
            if im is not None:
                n = len(im[0])
                boxes[j, :n], box_mask[j, :n], masked[j, :n] = im[0], True, im[1]
                if feats is not None:
                    feats[j, :n] = im[2]
        text.input_ids = text.input_ids.to(self.device)
        text.attention_mask = text.attention_mask.to(self.device)
        on = lambda a: torch.from_numpy(a).to(self.device)  # noqa: E731
        visual = on(feats) if feats is not None else [im[2] for im in images if im is not None]
        return text, on(boxes), on(box_mask), on(masked), visual

    def _language_states(self, text, boxes, box_mask, masked, visual):
        pixels = not self.model.config.image_feat_precomputed
        text_mask = text.attention_mask.bool() & (text.input_ids > 0)  # VL-BERT's text mask: ids > 0
        states, _ = self.model.encode(text.input_ids, text_mask, boxes, box_mask, masked,
                                      features=None if pixels else visual, images=visual if pixels else None)
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
