"""Decode-check a PNG with Pillow: the signature, every chunk's CRC up to IEND (`verify`), a full
decode of the pixel data (`load`), and the file ends with the (constant) IEND chunk, which Pillow
does not check. Enough to prove an image in a report is a whole, decodable PNG.

    info = check_png(data)     # -> PngInfo(width, height, mode); ValueError if broken
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image

IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"      # length 0, type, CRC-32 of b"IEND"


@dataclass(frozen=True)
class PngInfo:
    width: int
    height: int
    mode: str          # Pillow's pixel format, e.g. "RGBA"


def check_png(data: bytes) -> PngInfo:
    if not data.endswith(IEND):
        raise ValueError("not a whole PNG: it does not end with an IEND chunk")
    try:
        with Image.open(io.BytesIO(data), formats=["PNG"]) as img:
            img.verify()                     # chunk CRCs through IEND; the image is unusable after
        with Image.open(io.BytesIO(data), formats=["PNG"]) as img:
            img.load()                       # inflate and unfilter every scanline
            return PngInfo(img.width, img.height, img.mode)
    except (OSError, SyntaxError, ValueError) as exc:  # Pillow's errors for unreadable or damaged files
        raise ValueError(f"not a whole, decodable PNG: {exc}") from None
