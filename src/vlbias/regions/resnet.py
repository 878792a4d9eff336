"""The MSRA (caffe) ResNet pieces that bottom-up-attention's and Detectron's networks share
(vlbias.regions.modeling_bua, modeling_detectron_fpn): bias-free convolutions with frozen batch
norm, bottleneck stages with the stride in the first 1x1 convolution, and the seeded random weights
of their tests. Module and parameter names are detectron2's, as the bua checkpoint's.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F
from torchvision.ops import FrozenBatchNorm2d


class ConvNorm(nn.Conv2d):
    """Bias-free convolution followed by frozen batch norm (``<name>.weight``, ``<name>.norm.*``)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, bias=False)
        self.norm = FrozenBatchNorm2d(out_channels)

    def forward(self, x):
        return self.norm(super().forward(x))


class Bottleneck(nn.Module):
    """Caffe (MSRA) bottleneck: the stride is in the first 1x1 convolution."""

    def __init__(self, in_channels, bottleneck_channels, out_channels, stride=1, dilation=1):
        super().__init__()
        self.shortcut = ConvNorm(in_channels, out_channels, 1, stride) if in_channels != out_channels else None
        self.conv1 = ConvNorm(in_channels, bottleneck_channels, 1, stride)
        self.conv2 = ConvNorm(bottleneck_channels, bottleneck_channels, 3, 1, dilation, dilation)
        self.conv3 = ConvNorm(bottleneck_channels, out_channels, 1)

    def forward(self, x):
        out = F.relu_(self.conv1(x))
        out = F.relu_(self.conv2(out))
        out = self.conv3(out)
        out += x if self.shortcut is None else self.shortcut(x)
        return F.relu_(out)


def stage(blocks, in_channels, bottleneck_channels, out_channels, stride, dilation=1):
    return nn.Sequential(*(Bottleneck(in_channels if i == 0 else out_channels, bottleneck_channels, out_channels,
                                      stride if i == 0 else 1, dilation) for i in range(blocks)))


def random_init_(model, gen, bias_std):
    """Seeded random weights that keep a deep frozen-norm ResNet's activations finite, for tests:
    He-normal convolutions and linear layers (their biases normal with ``bias_std``, or zero for 0),
    unit-normal embeddings, and frozen norms of weight 1 with biases 0.1 normal, each residual
    branch ending in a norm of weight 0.2 so that 33 blocks do not blow up. ``gen`` (a seeded
    torch.Generator) draws every value, layer by layer in the model's order; each network then
    scales its own heads (its scores spread, its box deltas small)."""
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                fan_in = module.weight[0].numel()
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * math.sqrt(2.0 / fan_in))
                if module.bias is not None:
                    if bias_std:
                        module.bias.copy_(torch.randn(module.bias.shape, generator=gen) * bias_std)
                    else:
                        module.bias.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen))
            elif isinstance(module, FrozenBatchNorm2d):
                module.weight.fill_(0.2 if name.endswith("conv3.norm") else 1.0)
                module.bias.copy_(torch.randn(module.bias.shape, generator=gen) * 0.1)
                module.running_mean.zero_()
                module.running_var.fill_(1.0)
