"""JPEG images from Python: decoded pixels against Pillow's, crops by their geometry, bad files,
and image batches as numpy views and NHWC torch tensors.

Pillow (python3-pil) is the reference: it decodes with the same libjpeg-turbo, so a full-size
decode must equal it, and feedline's resize is Pillow's BILINEAR filter on the crop (what
torchvision's RandomResizedCrop and CenterCrop do on PIL images).
"""
import io
import os

import numpy as np
import pytest

import feedline

from support import M64, gen, manifest_digest

PIL = pytest.importorskip("PIL")
from PIL import Image, ImageOps  # noqa: E402

pytestmark = pytest.mark.skipif(
    b"jpeg: yes" not in __import__("subprocess").run(
        [os.environ.get("FEEDLINE_BIN", "feedline"), "--version"], capture_output=True).stdout,
    reason="built without JPEG")


def picture(w=160, h=120, seed=0):
    """An image with edges and texture (so that a wrong pixel shows): shapes on a gradient."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)], -1)
    for _ in range(6):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(5, w / 3)
        a[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
    a += rng.normal(0, 6, a.shape)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def jpeg(im, **kw):
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


def pillow(data):
    """What torchvision gets from a file: Pillow's decode, EXIF orientation applied, as RGB."""
    return ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")


def mad(a, b):
    return float(np.abs(a.astype(np.int16) - np.asarray(b).astype(np.int16)).mean())


VARIANTS = {
    "baseline 4:2:0": lambda im: jpeg(im, quality=90),
    "4:4:4": lambda im: jpeg(im, quality=90, subsampling=0),
    "progressive": lambda im: jpeg(im, quality=90, progressive=True),
    "grayscale": lambda im: jpeg(im.convert("L"), quality=90),
    "cmyk": lambda im: jpeg(im.convert("CMYK"), quality=90),
    "odd size 97x61": lambda im: jpeg(im.resize((97, 61)), quality=85),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_full_size_decode_is_pillows(variant):
    data = VARIANTS[variant](picture())
    pixels, info = feedline.decode_image(data)
    ref = pillow(data)
    assert pixels.shape == (ref.height, ref.width, 3) and pixels.dtype == np.uint8
    assert mad(pixels, ref) < 1.0, variant  # the bound; same library: equal here
    assert info["progressive"] == (variant == "progressive")
    assert info["components"] == {"grayscale": 1, "cmyk": 4}.get(variant, 3)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = jpeg(picture(150, 90), quality=90, exif=exif.tobytes())
    pixels, info = feedline.decode_image(data)
    ref = pillow(data)
    assert info["orientation"] == orientation
    assert pixels.shape == (ref.height, ref.width, 3)
    assert (info["width"], info["height"]) == ref.size
    assert mad(pixels, ref) < 1.0
    # A crop is taken of the picture as displayed.
    crop, info = feedline.decode_image(data, image_size=48, crop="random-resized", sample=5)
    x, y, w, h = info["crop"]
    want = ref.crop((x, y, x + w, y + h)).resize((48, 48), Image.BILINEAR)
    assert mad(crop, want) < 1.0


@pytest.mark.parametrize("crop", ["center", "random-resized", "none"])
def test_unscaled_crops_are_pillow_crop_then_resize(crop):
    """Without DCT scaling, feedline's crop + resize is torchvision's (Pillow crop, then resize
    BILINEAR): each pixel within a level (the passes' order rounds differently)."""
    data = jpeg(picture(400, 300, seed=2), quality=92)
    ref = pillow(data)
    for sample in range(6):
        pixels, info = feedline.decode_image(data, image_size=64, crop=crop, dct_scaling=False,
                                             seed=11, sample=sample)
        x, y, w, h = info["crop"]
        assert info["scale"] == (8, 8)
        want = np.asarray(ref.crop((x, y, x + w, y + h)).resize((64, 64), Image.BILINEAR))
        d = np.abs(pixels.astype(int) - want)
        assert d.max() <= 1 and d.mean() < 0.5, (crop, sample, info["crop"])


def test_crop_geometry():
    data = jpeg(picture(400, 300), quality=90)
    boxes = set()
    for sample in range(200):
        _, info = feedline.decode_image(data, image_size=32, crop="random-resized", seed=3,
                                        sample=sample)
        x, y, w, h = info["crop"]
        assert 0 <= x and 0 <= y and x + w <= 400 and y + h <= 300
        area, ratio = w * h / (400 * 300), w / h
        assert 0.08 * 0.95 <= area <= 1.0 and 0.75 * 0.95 <= ratio <= 4 / 3 * 1.05
        boxes.add(info["crop"])
        # The same seed, sample and epoch: the same crop; another epoch: its own.
        assert feedline.decode_image(data, image_size=32, crop="random-resized", seed=3,
                                     sample=sample)[1]["crop"] == info["crop"]
    assert len(boxes) > 190
    _, info = feedline.decode_image(data, image_size=224, crop="center")
    assert info["crop"] == (69, 19, 262, 262)  # 0.875 of the shorter side, centred


def test_dct_scaling_decodes_less_for_the_same_picture():
    """A crop at least twice the output's size decodes at 1/2 (or less): close to the full-size
    path's pixels, at a fraction of the IDCT work."""
    data = jpeg(picture(1200, 900, seed=4), quality=90)
    scaled, info = feedline.decode_image(data, image_size=224, crop="center")
    full, info_full = feedline.decode_image(data, image_size=224, crop="center", dct_scaling=False)
    assert info["scale"] == (4, 8) and info_full["scale"] == (8, 8)  # 788 px * 4/8 >= 224
    assert info["crop"] == info_full["crop"]
    assert mad(scaled, full) < 3.0


@pytest.mark.parametrize("what", ["png", "truncated", "not an image", "empty"])
def test_bad_files_raise_feedline_error(what):
    good = jpeg(picture(), quality=90)
    png = io.BytesIO()
    picture().save(png, "PNG")
    data = {
        "png": png.getvalue(),
        "truncated": good[: len(good) // 2],
        "not an image": b"GIF89a" + bytes(100),
        "empty": b"",
    }[what]
    with pytest.raises(feedline.Error) as e:
        feedline.decode_image(data, image_size=32, crop="random-resized")
    if what == "png":
        assert "PNG" in str(e.value)
    with pytest.raises(ValueError, match="crop"):
        feedline.decode_image(good, image_size=32, crop="sideways")
    with pytest.raises(TypeError):
        feedline.decode_image("not bytes")


@pytest.fixture(scope="module")
def jpeg_tar(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("jpeg") / "ds", "--format", "tar", "--samples", "96",
               "--samples-per-shard", "32", "--image", "jpeg:120x90:90")


def test_loader_image_batches(jpeg_tar):
    import torch
    loader = feedline.Loader(jpeg_tar, batch_size=16, epochs=2, seed=1, image_size=48,
                             crop="random-resized")
    digest, seen = 0, 0
    for b in loader:
        views = b.member(".jpg")
        assert all(v.shape == (48, 48, 3) and v.dtype == np.uint8 for v in views)
        t, lengths = b.to_torch(".jpg")
        assert t.shape == (len(b), 48, 48, 3) and t.dtype == torch.uint8
        assert (lengths == 48 * 48 * 3).all()
        assert np.array_equal(t[3].numpy(), views[3])  # the same bytes: no copy between them
        labels = b.member(".cls")
        assert all(v.ndim == 1 for v in labels)
        digest = (digest + b.digest) % M64
        seen += len(b)
    assert seen == 192
    assert digest == manifest_digest(jpeg_tar) * 2 % M64  # the JPEGs' bytes, as gen wrote them
    r = loader.report()
    assert r["data_path"]["decoders"] == [
        {"name": "jpeg", "output": "48x48x3 RGB, random-resized crop", "members": 96}]
    assert r["delivered"]["verified"] is True


def test_loader_pixels_are_decode_images(jpeg_tar):
    """What a batch holds is decode_image's answer for that sample, epoch and seed."""
    import tarfile
    stored = {}
    for shard in sorted(os.listdir(jpeg_tar)):
        if shard.endswith(".tar"):
            with tarfile.open(os.path.join(jpeg_tar, shard)) as t:
                for m in t.getmembers():
                    if m.name.endswith(".jpg"):
                        stored[m.name[:-4]] = t.extractfile(m).read()
    keys = sorted(stored)
    loader = feedline.Loader(jpeg_tar, batch_size=8, seed=7, image_size=40, crop="random-resized")
    checked = 0
    for b in loader:
        for key, view in zip(b.keys, b.member(".jpg")):
            want, _ = feedline.decode_image(stored[key], image_size=40, crop="random-resized",
                                            seed=7, sample=keys.index(key), epoch=b.epoch)
            assert np.array_equal(view, want), key
            checked += 1
    assert checked == 96


def test_loader_image_options_are_checked(jpeg_tar):
    with pytest.raises(ValueError, match="crop"):
        feedline.Loader(jpeg_tar, image_size=32, crop="sideways")
    with pytest.raises(ValueError, match="image_size"):
        feedline.Loader(jpeg_tar, crop="center")


def test_the_image_training_example_runs(tmp_path):
    import subprocess
    import sys
    pytest.importorskip("torch")
    ds = gen(tmp_path / "ds", "--format", "tar", "--samples", "256", "--samples-per-shard", "128",
             "--image", "jpeg:160x120:90")
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "train_images.py")
    out = subprocess.run([sys.executable, example, ds, "--batch-size", "32", "--image-size", "48"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "epoch 0: 8 steps" in out.stdout and "bottleneck:" in out.stdout, out.stdout
    assert "jpeg -> 48x48x3 RGB, random-resized crop for 256 members" in out.stdout, out.stdout
