"""Decode-check a PNG with zlib alone (no Pillow): signature, chunk CRCs, IHDR, the IDAT stream
inflates to exactly height * (1 + width * bytes_per_pixel) bytes, every scanline's filter type is
0..4, and IEND closes the file. Enough to prove an image in a report is a whole, decodable PNG.

    info = check_png(data)     # -> PngInfo(width, height, bit_depth, color_type); ValueError if broken
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}      # color type -> samples per pixel


@dataclass(frozen=True)
class PngInfo:
    width: int
    height: int
    bit_depth: int
    color_type: int


def check_png(data: bytes) -> PngInfo:
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG (bad signature)")
    pos = len(SIGNATURE)
    ihdr = None
    idat = []
    seen_end = False
    while pos < len(data):
        if pos + 8 > len(data):
            raise ValueError("truncated chunk header")
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length or pos + 12 + length > len(data):
            raise ValueError(f"truncated {ctype!r} chunk")
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(ctype + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"bad CRC in {ctype!r} chunk")
        if ctype == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif ctype == b"IDAT":
            idat.append(body)
        elif ctype == b"IEND":
            seen_end = True
            break
        pos += 12 + length
    if ihdr is None or not idat or not seen_end:
        raise ValueError("missing IHDR, IDAT or IEND")
    width, height, depth, color, _comp, _filt, interlace = ihdr
    if color not in CHANNELS or width == 0 or height == 0:
        raise ValueError(f"bad IHDR {ihdr}")
    if interlace:
        raise ValueError("interlaced PNGs are not checked")
    raw = zlib.decompress(b"".join(idat))
    row_bytes = (width * CHANNELS[color] * depth + 7) // 8
    if len(raw) != height * (1 + row_bytes):
        raise ValueError(f"pixel data is {len(raw)} bytes, expected {height * (1 + row_bytes)}")
    if any(raw[r * (1 + row_bytes)] > 4 for r in range(height)):
        raise ValueError("bad scanline filter type")
    return PngInfo(width, height, depth, color)
