"""SimCLRv2 (Chen et al. 2020) ResNets as image encoders: the representation the iEAT authors read.

    encoder = build({"adapter": "simclr", "depth": 152, "width": 3, "sk": 1, "checkpoint": "r152_3x_sk1.safetensors"})
    encoder.encode_images(pixels)      # uint8 (n, H, W, 3) square RGB -> float32 (n, 2048 * width)

The network is the official TensorFlow one (google-research/simclr ``resnet.py``, ``resnet_v1`` with
bottleneck blocks), in torch: ResNet-{50,101,152}, width 1-3x, optionally with selective kernels
(``sk: 1``: SK convolutions with ratio 1/16, the ResNet-D stem of three 3x3 convolutions and
average-pooled projection shortcuts). Padding follows TensorFlow's: the stem's max pool pads
'SAME' (bottom/right first) and the stride-1 average pool of an SK shortcut averages only the
pixels inside the image, where common torch ports pad symmetrically or count the zeros.

What each vector is (the authors' ``SimCLRExtractor``): the image shrunk to 224 x 224 with OpenCV's
INTER_AREA (``vlbias.images.decode.area_resize``; skipped when it already has ``image_size`` pixels a
side), scaled to [0, 1], and the hub module's ``default`` output: the final average-pooled block
output, before the projection head (2048 * width dimensions; 6144 for r152_3x_sk1).

Config entry keys (``adapter: simclr``):
    depth, width, sk   the architecture: 50 | 101 | 152, 1 | 2 | 3, 0 | 1 (default 152, 3, 1: the
                       paper's r152_3x_sk1)
    weights, exactly one of:
      checkpoint       a local file: .safetensors, or a torch file read with weights_only=True; our
                       parameter names (``python -m vlbias.models.simclr convert`` writes them from
                       the official TensorFlow checkpoints), or the common PyTorch conversion
                       (Separius/SimCLRv2-Pytorch ``convert.py``: {"resnet": ..., "head": ...}), whose
                       names are mapped one to one; loaded strictly (its supervised ``fc`` and the
                       projection head are not part of the representation and are dropped)
      weights: random  random initialisation, with ``seed`` (default 0)
    image_size         the side the network sees (default 224, the authors')
    model_id, revision recorded in ``.info``
    batch_size, device, threads, precision   see vlbias.runtime
"""

import argparse
import logging
import math
import re
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vlbias.errors import InputError
from vlbias.images.decode import area_resize, square_images
from vlbias.io.atomic import atomic_path
from vlbias.io.checkpoints import read_state_dict, some
from vlbias.io.fetch import sha256_file
from vlbias.models import register
from vlbias.registry import one_weights_source, weights_label
from vlbias.runtime import autocast, precision, runtime

log = logging.getLogger(__name__)

LAYERS = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}
SK_RATIO = 0.0625  # SimCLRv2's selective-kernel ratio
BN_EPS = 1e-5


def _same_padding(size, kernel, stride):
    """(before, after) padding of TensorFlow's 'SAME' along one axis: the odd pixel goes after."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def max_pool_same(x, kernel=3, stride=2):
    """TensorFlow's max pooling with padding='SAME' on (b, c, h, w)."""
    (top, bottom), (left, right) = (_same_padding(n, kernel, stride) for n in x.shape[-2:])
    return F.max_pool2d(F.pad(x, (left, right, top, bottom), value=-math.inf), kernel, stride)


def avg_pool_same(x, kernel=2, stride=1):
    """TensorFlow's average pooling with padding='SAME' on (b, c, h, w): padding is not averaged in."""
    (top, bottom), (left, right) = (_same_padding(n, kernel, stride) for n in x.shape[-2:])
    pad = (left, right, top, bottom)
    total = F.avg_pool2d(F.pad(x, pad), kernel, stride)
    count = F.avg_pool2d(F.pad(torch.ones_like(x[:1, :1]), pad), kernel, stride)
    return total / count


def _conv(cin, cout, kernel, stride=1):
    # TensorFlow's fixed padding (strided) and 'SAME' (stride 1) are both symmetric for odd kernels
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=(kernel - 1) // 2, bias=False)


def _bn(channels):
    return nn.BatchNorm2d(channels, eps=BN_EPS)


class SelectiveKernel(nn.Module):
    """SK convolution: two 3x3 streams mixed by a softmax over weights computed from their sum."""

    def __init__(self, cin, cout, stride, min_dim=32):
        super().__init__()
        self.conv = _conv(cin, 2 * cout, 3, stride)
        self.bn = _bn(2 * cout)
        mid = max(int(cout * SK_RATIO), min_dim)
        self.reduce = _conv(cout, mid, 1)
        self.reduce_bn = _bn(mid)
        self.mix = _conv(mid, 2 * cout, 1)

    def forward(self, x):
        streams = torch.stack(F.relu(self.bn(self.conv(x))).chunk(2, dim=1))  # (2, b, c, h, w)
        g = streams.sum(dim=0).mean(dim=(2, 3), keepdim=True)
        mixing = torch.stack(self.mix(F.relu(self.reduce_bn(self.reduce(g)))).chunk(2, dim=1))
        return (streams * mixing.softmax(dim=0)).sum(dim=0)


class Bottleneck(nn.Module):
    """1x1, 3x3 (or SK), 1x1 with a projection shortcut in a group's first block.

    Modules are created in the order TensorFlow creates its variables (the checkpoint converters
    rely on it): shortcut, conv1, conv2 (or sk), conv3.
    """

    def __init__(self, cin, filters, stride, sk, projection):
        super().__init__()
        self.stride, self.sk, self.projection = stride, sk, projection
        if projection:
            # ResNet-D with SK: average-pool first, then a stride-1 projection
            self.shortcut = _conv(cin, 4 * filters, 1, 1 if sk else stride)
            self.shortcut_bn = _bn(4 * filters)
        self.conv1 = _conv(cin, filters, 1)
        self.bn1 = _bn(filters)
        if sk:
            self.conv2 = SelectiveKernel(filters, filters, stride)
        else:
            self.conv2 = _conv(filters, filters, 3, stride)
            self.bn2 = _bn(filters)
        self.conv3 = _conv(filters, 4 * filters, 1)
        self.bn3 = _bn(4 * filters)

    def forward(self, x):
        shortcut = x
        if self.projection:
            if self.sk:
                # stride 2: TensorFlow pads (0, 1) with zeros and pools 'VALID'; stride 1: 'SAME'
                pooled = F.avg_pool2d(F.pad(x, (0, 1, 0, 1)), 2, 2) if self.stride > 1 else avg_pool_same(x)
                shortcut = self.shortcut_bn(self.shortcut(pooled))
            else:
                shortcut = self.shortcut_bn(self.shortcut(x))
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.conv2(x) if self.sk else F.relu(self.bn2(self.conv2(x)))
        return F.relu(self.bn3(self.conv3(x)) + shortcut)


class SimCLRv2ResNet(nn.Module):
    """The SimCLRv2 base network: (b, 3, s, s) images in [0, 1] -> (b, 2048 * width) representations."""

    def __init__(self, depth=152, width=3, sk=1):
        super().__init__()
        self.sk = bool(sk)
        channels = 64 * width
        if self.sk:  # ResNet-D stem: three 3x3 convolutions
            self.stem = nn.ModuleList([_conv(3, channels // 2, 3, 2), _bn(channels // 2),
                                       _conv(channels // 2, channels // 2, 3), _bn(channels // 2),
                                       _conv(channels // 2, channels, 3), _bn(channels)])
        else:
            self.stem = nn.ModuleList([_conv(3, channels, 7, 2), _bn(channels)])
        self.groups = nn.ModuleList()
        cin = channels
        for i, blocks in enumerate(LAYERS[depth]):
            filters = 64 * width * 2 ** i
            self.groups.append(nn.Sequential(*(
                Bottleneck(cin if b == 0 else 4 * filters, filters, (1 if i == 0 else 2) if b == 0 else 1,
                           self.sk, projection=b == 0) for b in range(blocks))))
            cin = 4 * filters
        self.dim = cin

    def forward(self, x):
        for conv, bn in zip(self.stem[::2], self.stem[1::2]):
            x = F.relu(bn(conv(x)))
        x = max_pool_same(x)
        for group in self.groups:
            x = group(x)
        return x.mean(dim=(2, 3))


@register("simclr")
class SimCLREncoder:
    def __init__(self, spec):
        self.device, self.batch_size = runtime(spec)
        self.precision = precision(spec)
        depth, width, sk = spec["depth"], spec["width"], spec["sk"]
        if depth not in LAYERS or width not in (1, 2, 3) or sk not in (0, 1):
            raise InputError("depth/width/sk", f"SimCLRv2 has depth 50, 101 or 152, width 1-3, sk 0 or 1; got "
                                               f"{depth!r}, {width!r}, {sk!r}")
        self.image_size = spec["image_size"]
        if isinstance(self.image_size, bool) or not isinstance(self.image_size, int) or self.image_size < 32:
            raise InputError("image_size", f"expected an integer of at least 32, got {self.image_size!r}")
        one_weights_source(spec, "simclr")
        checkpoint, random_init = spec.get("checkpoint"), spec.get("weights") == "random"
        seed, path = None, None
        if random_init:
            seed = int(spec["seed"])
            with torch.random.fork_rng(devices=[]):  # the weights depend on the seed alone
                torch.manual_seed(seed)
                model = SimCLRv2ResNet(depth, width, sk)
        else:
            path = Path(checkpoint)
            if not path.is_file():
                raise InputError(path, "checkpoint file not found")
            model = SimCLRv2ResNet(depth, width, sk)
            load_checkpoint(model, path, depth, sk)
        self.model = model.eval().requires_grad_(False).to(self.device)
        self.dim = model.dim
        name = f"r{depth}_{width}x_sk{sk}"
        self.info = {
            "adapter": "simclr",
            "model_id": spec.get("model_id") or f"SimCLRv2 {name}",
            "revision": spec.get("revision"),
            "architecture": name,
            "weights": weights_label(spec),
            "weights_file": str(path) if path else None,
            "weights_sha256": sha256_file(path) if path else None,
            "seed": seed,
            "output": "final average pool, before the projection head (the hub module's `default`)",
            "preprocess": f"square RGB shrunk to {self.image_size}x{self.image_size} (OpenCV INTER_AREA), x / 255",
            "dim": self.dim,
            "device": str(self.device),
            "precision": self.precision,
            "dtype": "float32",
            "versions": {"torch": torch.__version__},
        }
        log.info("simclr: %s, %s weights%s, dim %d, on %s", name, self.info["weights"],
                 f" from {path}" if path else "", self.dim, self.device)

    def encode_images(self, pixels):
        """float32 (n, dim) representations of uint8 (n, H, W, 3) square RGB images."""
        pixels = square_images(pixels, self.image_size)
        out = np.empty((len(pixels), self.dim), dtype=np.float32)
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(pixels), self.batch_size):
                batch = pixels[start:start + self.batch_size]
                if batch.shape[1] != self.image_size:
                    batch = area_resize(batch, self.image_size)
                x = torch.from_numpy(np.ascontiguousarray(batch)).to(self.device).permute(0, 3, 1, 2)
                out[start:start + len(batch)] = self.model(x.float() / 255).float().cpu().numpy()
        return out


def load_checkpoint(model, path, depth, sk):
    """Load ``path`` strictly into ``model``: our names, or the Separius/SimCLRv2-Pytorch conversion."""
    state = read_state_dict(path, wrappers=("state_dict", "resnet"))
    if any(k.startswith("net.") for k in state):
        state = from_torch_port(state, model, depth, sk, path)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        missing = [k for k in model.state_dict() if k not in state]
        unexpected = [k for k in state if k not in model.state_dict()]
        shapes = re.search(r"size mismatch for .*", str(e))
        raise InputError(path, "does not fit the configured depth/width/sk: " + (
            shapes.group(0) if shapes else f"missing {some(missing)}, unexpected {some(unexpected)}")) from e


def from_torch_port(state, model, depth, sk, source):
    """Separius/SimCLRv2-Pytorch's ``resnet`` state_dict under our names; its supervised ``fc`` is dropped."""
    theirs = torch_port_names(depth, sk)
    ours = list(model.state_dict())
    assert len(theirs) == len(ours), (len(theirs), len(ours))
    names = dict(zip(theirs, ours))  # both list the TensorFlow variables in creation order
    missing = [k for k in theirs if k not in state]
    unexpected = [k for k in state if k not in names and not k.startswith("fc.")]
    if missing or unexpected:
        raise InputError(source, f"not a SimCLRv2-Pytorch r{depth} sk{sk} network: missing {some(missing)}, "
                                 f"unexpected {some(unexpected)}")
    return {names[k]: v for k, v in state.items() if k in names}


def torch_port_names(depth, sk):
    """The tensor names of Separius/SimCLRv2-Pytorch's ``ResNet`` (``resnet.py``), in creation order."""
    def bn(p):
        return [f"{p}.{s}" for s in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")]

    names = []
    for conv, norm in [("0", "1.0"), ("2", "3.0"), ("4", "5.0")] if sk else [("0", "1.0")]:
        names += [f"net.0.{conv}.weight", *bn(f"net.0.{norm}")]
    for g, blocks in enumerate(LAYERS[depth]):
        for i in range(blocks):
            p = f"net.{g + 1}.blocks.{i}"
            if i == 0:
                names += [f"{p}.projection.shortcut{'.2' if sk else ''}.weight", *bn(f"{p}.projection.bn.0")]
            names += [f"{p}.net.0.weight", *bn(f"{p}.net.1.0")]
            if sk:
                names += [f"{p}.net.2.main_conv.0.weight", *bn(f"{p}.net.2.main_conv.1.0"),
                          f"{p}.net.2.mixing_conv.0.weight", *bn(f"{p}.net.2.mixing_conv.1.0"),
                          f"{p}.net.2.mixing_conv.2.weight", f"{p}.net.3.weight", *bn(f"{p}.net.4.0")]
            else:
                names += [f"{p}.net.2.weight", *bn(f"{p}.net.3.0"), f"{p}.net.4.weight", *bn(f"{p}.net.5.0")]
    return names


def convert_tf_checkpoint(tf_checkpoint, out, depth, width, sk, prefix="base_model/"):
    """Write the official TensorFlow checkpoint's base network as a safetensors file of our names.

    ``tf_checkpoint``: the checkpoint prefix (e.g. ``r152_3x_sk1/model.ckpt-250228``). TensorFlow
    (``pip install .[tf]``) reads it. Variables are matched by creation order: ``conv2d``,
    ``conv2d_1``, ... onto our convolutions, ``batch_normalization_N`` onto our batch norms, each
    shape checked; ``prefix`` ``ema_model/base_model/`` takes the EMA weights instead.
    Returns the list of variables left out (optimizer state, heads).
    """
    import safetensors.torch
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(tf_checkpoint))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith(prefix) and not n.endswith("/Momentum")]

    def index(layer):  # conv2d -> 0, conv2d_7 -> 7
        return int(layer.rsplit("_", 1)[1]) if re.search(r"_\d+$", layer) else 0

    convs = sorted({n for n in names if re.fullmatch(re.escape(prefix) + r"conv2d(_\d+)?/kernel", n)},
                   key=lambda n: index(n.split("/")[-2]))
    bns = sorted({n.rsplit("/", 1)[0] for n in names if "/batch_normalization" in n},
                 key=lambda n: index(n.split("/")[-1]))
    model = SimCLRv2ResNet(depth, width, sk)
    conv_modules = [(k, m) for k, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    bn_modules = [(k, m) for k, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    if (len(convs), len(bns)) != (len(conv_modules), len(bn_modules)):
        raise InputError(tf_checkpoint, f"has {len(convs)} convolutions and {len(bns)} batch norms under "
                                        f"'{prefix}', r{depth}_{width}x_sk{sk} {len(conv_modules)} and "
                                        f"{len(bn_modules)}: another architecture?")
    state = {}
    for tf_name, (name, _) in zip(convs, conv_modules):
        w = torch.from_numpy(reader.get_tensor(tf_name)).permute(3, 2, 0, 1)  # (kh, kw, in, out) -> (out, in, kh, kw)
        state[f"{name}.weight"] = w
    for tf_name, (name, _) in zip(bns, bn_modules):
        for ours, theirs in (("weight", "gamma"), ("bias", "beta"), ("running_mean", "moving_mean"),
                             ("running_var", "moving_variance")):
            state[f"{name}.{ours}"] = torch.from_numpy(reader.get_tensor(f"{tf_name}/{theirs}"))
        state[f"{name}.num_batches_tracked"] = torch.tensor(0)
    expected = model.state_dict()
    bad = [k for k in expected if k not in state or state[k].shape != expected[k].shape]
    if bad:
        raise InputError(tf_checkpoint, f"shapes do not fit r{depth}_{width}x_sk{sk}: {some(bad)}")
    model.load_state_dict(state, strict=True)
    with atomic_path(out) as tmp:
        safetensors.torch.save_file({k: v.contiguous().float() if v.is_floating_point() else v
                                     for k, v in state.items()}, tmp)
    used = set(convs) | {f"{b}/{p}" for b in bns for p in ("gamma", "beta", "moving_mean", "moving_variance")}
    return sorted(n for n in reader.get_variable_to_shape_map() if n not in used)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m vlbias.models.simclr",
                                     description="SimCLRv2 checkpoint conversion")
    sub = parser.add_subparsers(dest="command", required=True)
    convert = sub.add_parser("convert", help="official TensorFlow checkpoint -> safetensors (needs tensorflow)")
    convert.add_argument("tf_checkpoint", help="checkpoint prefix, e.g. r152_3x_sk1/model.ckpt-250228")
    convert.add_argument("-o", "--output", required=True, type=Path)
    convert.add_argument("--depth", type=int, required=True, choices=sorted(LAYERS))
    convert.add_argument("--width", type=int, required=True, choices=[1, 2, 3])
    convert.add_argument("--sk", type=int, required=True, choices=[0, 1])
    convert.add_argument("--ema", action="store_true", help="the exponential moving average weights")
    args = parser.parse_args(argv)
    left = convert_tf_checkpoint(args.tf_checkpoint, args.output, args.depth, args.width, args.sk,
                                 prefix="ema_model/base_model/" if args.ema else "base_model/")
    print(f"wrote {args.output} (sha256 {sha256_file(args.output)}); {len(left)} variables left out "
          "(heads, optimizer state)")


if __name__ == "__main__":
    main()
