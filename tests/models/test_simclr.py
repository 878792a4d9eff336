"""The SimCLRv2 adapter: TensorFlow's padding, checkpoints in our names and the common torch port's.

Differential tests, each skipped with its reason when its reference is absent:
- ``VLBIAS_SIMCLR_REFERENCE``: a checkout of google-research/simclr (its TF1 ``resnet.py``) and an
  importable ``tensorflow``: identical random weights through the official network and ours, the
  weights passed through our TensorFlow-checkpoint converter;
- ``VLBIAS_SIMCLR_PYTORCH_REFERENCE``: a checkout of Separius/SimCLRv2-Pytorch (``resnet.py``).
"""


import numpy as np
import pytest

from helpers import checkout, plain_module
from helpers.tiny import SIMCLR_R50_SK1 as R50_SK1

from vlbias.errors import InputError
from vlbias.models import build




def pixels(n, size=64, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def randomize_batch_norms(model, seed):
    """Random batch-norm statistics and affine parameters (fresh ones are the identity)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)


def test_tensorflow_same_pooling_by_hand():
    import torch

    from vlbias.models.simclr import avg_pool_same, max_pool_same

    x = torch.arange(16.0).view(1, 1, 4, 4)
    # 'SAME', 3x3, stride 2 on 4 pixels: windows start at 0 and 2, the odd padding pixel after the image
    np.testing.assert_array_equal(max_pool_same(x)[0, 0].numpy(), [[10, 11], [14, 15]])
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]).view(1, 1, 3, 3)
    # 'SAME', 2x2, stride 1: the last row and column average only the pixels inside the image
    np.testing.assert_allclose(avg_pool_same(x)[0, 0].numpy(),
                               [[3.0, 4.0, 4.5], [6.0, 7.0, 7.5], [7.5, 8.5, 9.0]])


@pytest.mark.parametrize("depth,sk,dim", [(50, 1, 2048), (50, 0, 2048)])
def test_shapes_batches_and_resizing(depth, sk, dim):
    from vlbias.images.decode import area_resize

    one = build({**R50_SK1, "depth": depth, "sk": sk, "batch_size": 1})
    randomize_batch_norms(one.model, 0)
    x = pixels(4)
    a = one.encode_images(x)
    assert a.shape == (4, dim) and a.dtype == np.float32 and one.dim == dim
    one.batch_size = 3  # the same network in batches of three
    np.testing.assert_allclose(a, one.encode_images(x), rtol=1e-5, atol=1e-5)
    big = pixels(2, size=128)
    np.testing.assert_array_equal(one.encode_images(big), one.encode_images(area_resize(big, 64)))
    assert one.encode_images(pixels(0)).shape == (0, dim)
    assert one.info["architecture"] == f"r{depth}_1x_sk{sk}" and one.info["weights"] == "random-init"


def test_sk_and_width_change_the_network():
    import torch

    from vlbias.models.simclr import SimCLRv2ResNet

    with torch.device("meta"):  # shapes alone: no weights drawn (r152_3x_sk1 is 795M parameters)
        nets = {a: SimCLRv2ResNet(*a).eval() for a in ((50, 1, 0), (50, 1, 1), (101, 1, 1), (50, 2, 0), (50, 2, 1),
                                                       (152, 3, 1))}
        # a forward pass of shapes: it fails where a layer's channels (the stem's too) do not follow the width
        wide = {a: (m.dim, tuple(m(torch.empty(2, 3, 64, 64)).shape)) for a, m in nets.items() if a[1] > 1}
    assert wide == {(50, 2, 0): (4096, (2, 4096)), (50, 2, 1): (4096, (2, 4096)), (152, 3, 1): (6144, (2, 6144))}
    # published sizes (SimCLRv2 paper, Table 1)
    assert {a: round(sum(p.numel() for p in m.parameters()) / 1e6) for a, m in nets.items()} == {
        (50, 1, 0): 24, (50, 1, 1): 35, (101, 1, 1): 65, (50, 2, 0): 94, (50, 2, 1): 140, (152, 3, 1): 795}


def test_checkpoint_round_trip_and_the_torch_port(tmp_path):
    import hashlib

    import safetensors.torch
    import torch

    from vlbias.models.simclr import torch_port_names

    source = build({**R50_SK1, "seed": 4})
    randomize_batch_norms(source.model, 1)
    state = source.model.state_dict()
    x = pixels(2)
    expected = source.encode_images(x)
    safetensors.torch.save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "r50.safetensors")
    # the common conversion: {"resnet": state_dict under its names (with the supervised fc), "head": ...}
    port = dict(zip(torch_port_names(50, 1), state.values()))
    port |= {"fc.weight": torch.zeros(1000, 2048), "fc.bias": torch.zeros(1000)}
    torch.save({"resnet": port, "head": {"layers.0.weight": torch.zeros(2048, 2048)}}, tmp_path / "r50_1x_sk1.pth")
    spec = {k: v for k, v in R50_SK1.items() if k not in ("weights", "seed")}
    for name in ("r50.safetensors", "r50_1x_sk1.pth"):
        enc = build({**spec, "checkpoint": str(tmp_path / name)})
        np.testing.assert_array_equal(enc.encode_images(x), expected)
        assert enc.info["weights_sha256"] == hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
    with pytest.raises(InputError, match="r50_1x_sk1.pth: not a SimCLRv2-Pytorch r101 sk1 network: missing"):
        build({**spec, "depth": 101, "checkpoint": str(tmp_path / "r50_1x_sk1.pth")})
    with pytest.raises(InputError, match=r"r50.safetensors: does not fit the configured depth/width/sk: size mism"):
        build({**spec, "width": 2, "checkpoint": str(tmp_path / "r50.safetensors")})
    with pytest.raises(InputError, match=r"r50.safetensors: does not fit .* missing groups\.2\.6"):
        build({**spec, "depth": 101, "checkpoint": str(tmp_path / "r50.safetensors")})


def test_bad_entries_are_refused(tmp_path):
    with pytest.raises(InputError, match="depth/width/sk: SimCLRv2 has depth 50, 101 or 152"):
        build({**R50_SK1, "depth": 34})
    with pytest.raises(InputError, match="depth/width/sk"):
        build({**R50_SK1, "sk": 2})
    with pytest.raises(InputError, match="simclr: set exactly one of"):
        build({**R50_SK1, "checkpoint": "x.safetensors"})
    with pytest.raises(InputError, match="simclr: set exactly one of"):
        build({k: v for k, v in R50_SK1.items() if k != "weights"})
    with pytest.raises(InputError, match="missing.safetensors: checkpoint file not found"):
        build({k: v for k, v in R50_SK1.items() if k != "weights"} | {"checkpoint": "missing.safetensors"})
    with pytest.raises(InputError, match="image_size: expected an integer of at least 32"):
        build({**R50_SK1, "image_size": 16})
    enc = build(R50_SK1)
    with pytest.raises(InputError, match="pixels: 32x32 images are smaller than the model's 64x64 input"):
        enc.encode_images(pixels(1, size=32))


# --- reference implementations ------------------------------------------------------------------

def test_matches_the_simclrv2_pytorch_port_with_tensorflow_padding(tmp_path):
    """Separius/SimCLRv2-Pytorch with identical random weights: equal once its two paddings are TensorFlow's."""
    import torch

    folder = checkout("VLBIAS_SIMCLR_PYTORCH_REFERENCE", "a checkout of Separius/SimCLRv2-Pytorch (f4c2f411)",
                      "resnet.py")
    port = plain_module("simclrv2_pytorch_resnet", folder / "resnet.py")  # both references call theirs resnet

    from vlbias.models.simclr import avg_pool_same, max_pool_same

    class Pool(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)

    x = pixels(2)
    for sk in (0, 1):
        torch.manual_seed(sk)
        reference, _ = port.get_resnet(50, 1, 0.0625 if sk else 0)
        randomize_batch_norms(reference, 2)
        reference.eval()
        torch.save({"resnet": reference.state_dict()}, tmp_path / "port.pth")
        ours = build({**R50_SK1, "sk": sk, "weights": None, "checkpoint": str(tmp_path / "port.pth")})
        images = torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255
        with torch.no_grad():
            before = reference(images).numpy()
            # its max pool pads symmetrically; its stride-1 SK shortcut averages zero padding in
            reference.net[0][-1] = Pool(max_pool_same)
            for m in reference.modules():
                if isinstance(m, port.Projection) and sk and m.shortcut[1].stride == 1:
                    m.shortcut[0], m.shortcut[1] = torch.nn.Identity(), Pool(avg_pool_same)
            after = reference(images).numpy()
        got = ours.encode_images(x)
        print(f"sk{sk}: max abs difference {np.abs(got - after).max():.2e} with TensorFlow's padding, "
              f"{np.abs(got - before).max():.2e} with the port's own")
        np.testing.assert_allclose(got, after, rtol=1e-5, atol=1e-5)


def test_matches_the_official_tensorflow_network(tmp_path):
    """google-research/simclr's resnet_v1 with random weights, saved as a TF checkpoint, converted, run by ours."""
    folder = checkout("VLBIAS_SIMCLR_REFERENCE", "a checkout of google-research/simclr (its TF1 resnet.py)",
                      "resnet.py")
    tf = pytest.importorskip("tensorflow.compat.v1", reason="needs tensorflow (pip install .[tf]; "
                                                            "TF_USE_LEGACY_KERAS=1 with tf_keras for TF >= 2.16)")
    from absl import flags

    from vlbias.models.simclr import convert_tf_checkpoint

    for name, kind, default in [("global_bn", "bool", False), ("batch_norm_decay", "float", 0.9),
                                ("sk_ratio", "float", 0.0), ("se_ratio", "float", 0.0),
                                ("train_mode", "string", "pretrain"), ("fine_tune_after_block", "integer", -1)]:
        if name not in flags.FLAGS:
            getattr(flags, f"DEFINE_{kind}")(name, default, "")
    flags.FLAGS(["test"])
    official = plain_module("simclr_official_resnet", folder / "resnet.py")

    x = pixels(2)
    rng = np.random.default_rng(0)
    for sk in (0, 1):
        flags.FLAGS.sk_ratio = 0.0625 if sk else 0.0
        with tf.Graph().as_default(), tf.Session() as sess:
            images = tf.placeholder(tf.float32, [None, 64, 64, 3])
            with tf.variable_scope("base_model"):
                hiddens = official.resnet_v1(50, 1)(images, is_training=False)
            sess.run(tf.global_variables_initializer())
            for v in tf.global_variables():  # batch-norm statistics and affine parameters at random too
                if v.name.split("/")[-1].split(":")[0] in ("gamma", "beta", "moving_mean", "moving_variance"):
                    low = 0.5 if v.name.endswith(("gamma:0", "moving_variance:0")) else -0.1
                    v.load(rng.uniform(low, low + (1.0 if low > 0 else 0.2), v.shape).astype(np.float32), sess)
            expected = sess.run(hiddens, {images: x / 255.0})
            prefix = tf.train.Saver().save(sess, str(tmp_path / f"sk{sk}" / "model.ckpt"))
        left = convert_tf_checkpoint(prefix, tmp_path / f"r50_1x_sk{sk}.safetensors", 50, 1, sk)
        assert left == []  # every variable of the network was used
        ours = build({**R50_SK1, "sk": sk, "weights": None,
                      "checkpoint": str(tmp_path / f"r50_1x_sk{sk}.safetensors")})
        got = ours.encode_images(x)
        print(f"sk{sk}: max abs difference {np.abs(got - expected).max():.2e} "
              f"(largest |value| {np.abs(expected).max():.2f})")
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
