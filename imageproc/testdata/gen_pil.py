"""Writes the Pillow reference vectors the imageproc tests read.

Run with a Python that has Pillow and NumPy (Debian's python3-pil 9.4.0 and
python3-numpy made the committed files):  python3 gen_pil.py
Nothing here is needed to run the Go tests.

resize/: synthetic 8-bit RGB inputs and Pillow's Image.resize outputs, as
PNG (lossless), listed in resize/cases.json.
clip_pixels.safetensors: CLIPImageProcessor's pixel_values for a few inputs
and configs, computed as transformers 4.47 does it (PIL resize of the
shortest edge, center crop with zero padding, float64 rescale cast to
float32, float32 normalise), listed in clip_cases.json.
"""
import json
import math
import struct

import numpy as np
from PIL import Image

rng = np.random.default_rng(20)


def synthetic(w, h, kind):
    if kind == "noise":
        a = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    elif kind == "edges":  # hard steps: exercises clipping of the negative lobes
        a = np.zeros((h, w, 3), dtype=np.uint8)
        a[:, : w // 2, 0] = 255
        a[h // 3 :, :, 1] = 255
        a[::2, ::3, 2] = 255
    else:  # smooth gradients
        y, x = np.mgrid[0:h, 0:w]
        a = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 127 // max(w + h - 2, 1)], -1).astype(np.uint8)
    return a


FILTERS = {"lanczos": Image.LANCZOS, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "box": Image.BOX, "hamming": Image.HAMMING}

RESIZES = [
    # (input w, h, kind, filter, output w, h)
    (48, 32, "noise", "bicubic", 42, 28),  # the golden's CLIP resize
    (37, 23, "edges", "bicubic", 11, 7),  # strong downscale, odd sizes
    (9, 7, "noise", "bicubic", 31, 20),  # upscale
    (40, 30, "edges", "lanczos", 13, 10),
    (7, 5, "edges", "lanczos", 29, 17),
    (30, 20, "noise", "lanczos", 30, 9),  # vertical pass only
    (30, 20, "grad", "lanczos", 11, 20),  # horizontal pass only
    (25, 19, "noise", "lanczos", 33, 8),  # up one way, down the other
    (16, 16, "edges", "bilinear", 6, 23),
    (17, 13, "noise", "box", 5, 6),
    (17, 13, "edges", "hamming", 40, 4),
    (1, 1, "noise", "lanczos", 3, 2),
    (5, 1, "edges", "bicubic", 1, 4),
]


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def resize_cases():
    cases = []
    for i, (w, h, kind, flt, ow, oh) in enumerate(RESIZES):
        src = Image.fromarray(synthetic(w, h, kind), "RGB")
        out = src.resize((ow, oh), resample=FILTERS[flt])
        name_in, name_out = f"in_{i:02d}.png", f"out_{i:02d}.png"
        src.save("resize/" + name_in)
        out.save("resize/" + name_out)
        cases.append({"input": name_in, "filter": flt, "width": ow, "height": oh, "want": name_out})
    with open("resize/cases.json", "w") as f:
        json.dump({"pillow": Image.__version__, "cases": cases}, f, indent=1)


def clip_pixels(img, cfg):
    """transformers 4.47 CLIPImageProcessor.preprocess for one RGB image."""
    a = np.array(img.convert("RGB"))
    if cfg["do_resize"]:
        s = cfg["size"]["shortest_edge"]
        h, w = a.shape[:2]
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(s * long / short)
        oh, ow = (new_long, s) if w <= h else (s, new_long)
        a = np.array(Image.fromarray(a).resize((ow, oh), resample=cfg["resample"]))
    if cfg["do_center_crop"]:
        ch, cw = cfg["crop_size"]["height"], cfg["crop_size"]["width"]
        h, w = a.shape[:2]
        top, left = (h - ch) // 2, (w - cw) // 2
        if top >= 0 and left >= 0 and top + ch <= h and left + cw <= w:
            a = a[top : top + ch, left : left + cw]
        else:
            nh, nw = max(ch, h), max(cw, w)
            pad = np.zeros((nh, nw, 3), dtype=a.dtype)
            tp, lp = math.ceil((nh - h) / 2), math.ceil((nw - w) / 2)
            pad[tp : tp + h, lp : lp + w] = a
            top, left = top + tp, left + lp
            a = pad[max(0, top) : min(nh, top + ch), max(0, left) : min(nw, left + cw)]
    a = (a.astype(np.float64) * cfg["rescale_factor"]).astype(np.float32)
    mean = np.array(cfg["image_mean"], dtype=np.float32)
    std = np.array(cfg["image_std"], dtype=np.float32)
    a = (a - mean) / std
    return a.transpose(2, 0, 1)


def clip_cases():
    base = json.load(open("wan21_i2v_preprocessor_config.json"))
    variants = [
        ("wan21_i2v", "wan21_i2v_image.png", {}),
        ("odd_down", "resize/in_01.png", {}),  # 37x23: new long side int(28*37/23) = 45, odd crop offsets
        ("upscale", "resize/in_02.png", {}),  # 9x7 grows to 36x28
        ("crop_pads", "resize/in_01.png", {"size": {"shortest_edge": 20}}),  # 32x20 cut to 28x28: zero rows
        ("tall_lanczos", "resize/in_04.png", {"resample": 1, "size": {"shortest_edge": 6}, "crop_size": {"height": 5, "width": 4}}),
    ]
    tensors, cases = {}, []
    for name, path, over in variants:
        cfg = dict(base, **over)
        img = Image.open(path)
        if name == "tall_lanczos":
            img = img.transpose(Image.TRANSPOSE)
            img.save("resize/tall.png")
            path = "resize/tall.png"
        tensors[name] = clip_pixels(img, cfg)
        cases.append({"name": name, "image": path, "config": over})
    write_safetensors("clip_pixels.safetensors", tensors)
    with open("clip_cases.json", "w") as f:
        json.dump({"pillow": Image.__version__, "base": "wan21_i2v_preprocessor_config.json", "cases": cases}, f, indent=1)


resize_cases()
clip_cases()
