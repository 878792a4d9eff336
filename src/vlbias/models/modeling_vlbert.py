"""VL-BERT's network (Su et al. 2020), ported from its authors' code (common/visual_linguistic_bert.py,
common/fast_rcnn.py, pretrain/modules/resnet_vlbert_for_pretraining_multitask.py): module and
parameter names as their checkpoints', so those load strictly. What it is fed, and how, is the
adapter's (vlbias.models.vlbert).

One BERT over the caption and the image's boxes: [CLS] caption [SEP], one token per box, [END]. A
box's visual feature is obj_downsample(sin/cos embedding of its position, its 2048-d region feature);
every caption token carries the whole-image box's visual feature (or, text only, the learned
``aux_text_visual_embedding``). Object tokens share the position after the text and the segment 2.
End to end (``image_feat_precomputed: false``) the region features come from its own Fast R-CNN head
(ResNet-101 to res4, RoIAlign 14x14 on the boxes, the dilated res5 and a mean pool).

Random weights initialise as the original, except the two visual LayerNorms, whose weights start at
``initializer_range`` (the original's 0 would make a random model ignore the image), and the
ResNet, whose convolutions are scaled down so that activations stay moderate without trained batch
statistics.
"""

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torchvision.models.resnet import Bottleneck
from torchvision.ops import roi_align

from vlbias.models.bert_layers import (LN_EPS, Layer, LMPredictionHead, PredictionHead, additive_mask,
                                       init_weights)

FEATURE_DIM = 2048       # the bottom-up-attention / ResNet-101 res5 region features
COORD_DIM = 256          # sin and cos of each of the 4 box coordinates at 256 frequencies: 2048 values
OBJECT_SEGMENT = 2       # the token type of object tokens and [END]
POOL = 14                # RoIAlign output (the res5 head keeps it: stride 1, dilation 2)


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
        # masked-region classification: the Visual Genome class (1601 with background) of an object token
        self.mvrc_head = PredictionHead(h, config.visual_region_classes, "region_cls_pred", layer_norm=False)

    def forward(self, input_ids, text_mask, text_visual, object_visual, object_linguistic, object_mask, length=None):
        """Final states of the joint sequence: text (b, L, hidden), objects (b, K, hidden).

        ``input_ids`` (b, L) and ``text_mask`` (b, L) bool, padded at the end; ``text_visual`` (b, L,
        hidden) each token's visual feature; ``object_visual``, ``object_linguistic`` (b, K, hidden)
        and ``object_mask`` (b, K) bool, padded at the end. The sequence is each row's text, its
        objects and [END], packed without gaps (VisualLinguisticBert.embedding), padded to the longest
        or to ``length`` if that is more.
        """
        b = len(input_ids)
        text = self.word_embeddings(input_ids) + self.visual_ln_text(text_visual)
        objects = object_linguistic + self.visual_ln_object(object_visual)
        text_end = text_mask.sum(1, keepdim=True)
        object_end = text_end + object_mask.sum(1, keepdim=True)
        length = max(int(object_end.max()) + 1, length or 0)
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

    def encode(self, input_ids, text_mask, boxes, box_mask, masked, features, length=None):
        """Final text (b, L, hidden) and object (b, K, hidden) states.

        ``boxes`` (b, K, 6): x1, y1, x2, y2 in the resized image's pixels and its w, h, the
        whole-image box first; ``box_mask`` (b, K) bool, a row without boxes is text only;
        ``masked`` (b, K) bool, masked regions; ``features`` (b, K, 2048) the boxes' region features:
        precomputed (a masked one replaced here by the learned mask embedding), or end to end the
        RoI features ``image_feature_extractor.region_features`` gives (a masked box's pixels blanked);
        ``length``: the joint sequence's padded length, if more than the longest's (VisualLinguisticBert).
        """
        reps = boxes.new_zeros((*box_mask.shape, self.config.hidden_size))
        if box_mask.any():
            region = features[box_mask]
            if self.config.image_feat_precomputed:
                region = torch.where(masked[box_mask][:, None], self.object_mask_visual_embedding.weight[0], region)
            # .to: under bf16 autocast the extractor gives bfloat16 (a no-op in fp32)
            reps[box_mask] = self.image_feature_extractor(region, boxes[box_mask]).to(reps.dtype)
        # every caption token sees the whole-image box's feature; a text-only row the text-corpus embedding
        text_visual = self.aux_text_visual_embedding.weight[0].expand(len(input_ids), -1)
        if box_mask.shape[1]:
            text_visual = torch.where(box_mask[:, :1], reps[:, 0], text_visual)
        text_visual = text_visual[:, None].expand(-1, input_ids.shape[1], -1)
        linguistic = torch.where(masked[..., None], self.object_mask_word_embedding.weight[0],
                                 self.object_linguistic_embeddings.weight[0])
        return self.vlbert(input_ids, text_mask, text_visual, reps, linguistic, box_mask, length)

    def forward(self, input_ids, text_mask, boxes, box_mask, masked, features):
        """Masked-word logits (b, L, vocab_size) and masked-region class logits (b, K, visual_region_classes)."""
        text, objects = self.encode(input_ids, text_mask, boxes, box_mask, masked, features)
        return self.vlbert.mlm_head.predictions(text), self.vlbert.mvrc_head(objects)


def _init_resnet(module):
    """He-normal convolutions (fan out, as the original), halved so that 33 residual blocks keep
    moderate activations with batch norm at its initial statistics (mean 0, variance 1)."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            m.weight.data.mul_(0.5)
