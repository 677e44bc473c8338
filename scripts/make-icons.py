#!/usr/bin/env python3
"""Draws dspark's icons with the standard library only (zlib PNG writer, supersampled polygons).

Outputs (all RGBA PNG unless noted):
  assets/tray-template.png      36x36  black + alpha: macOS menu-bar template image
  assets/tray-template@2x.png   44x44  black + alpha (largest size macOS shows sharply)
  assets/tray-linux.png         36x36  light glyph for dark Linux panels (template flag is ignored there)
  assets/app-icon-1024.png      1024x1024 app icon source
  src-tauri/icons/{32x32,128x128,128x128@2x,icon}.png, icon.icns, icon.ico; ui/icon.png (64x64)

Run from anywhere: python3 scripts/make-icons.py
"""
import math
import os
import struct
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def png_bytes(w, h, rgba):
    """rgba: bytearray of w*h*4."""
    raw = bytearray()
    stride = w * 4
    for y in range(h):
        raw.append(0)
        raw += rgba[y * stride:(y + 1) * stride]

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))


def spark(cx, cy, r, p=3.2, steps=128):
    """A four-point sparkle: a super-ellipse with exponent < 1 (astroid-like concave sides)."""
    pts = []
    for i in range(steps):
        a = 2 * math.pi * i / steps
        c, s = math.cos(a), math.sin(a)
        x = math.copysign(abs(c) ** p, c)
        y = math.copysign(abs(s) ** p, s)
        pts.append((cx + r * x, cy - r * y))
    return pts


def coverage(polys, w, h, ss=4):
    """Fraction of each pixel covered by the union of polygons (scanline fill, ss x ss samples)."""
    cov = [0.0] * (w * h)
    unit = 1.0 / (ss * ss)
    for y in range(h):
        for sy in range(ss):
            py = y + (sy + 0.5) / ss
            spans = []
            for poly in polys:
                xs = []
                n = len(poly)
                for i in range(n):
                    (x0, y0), (x1, y1) = poly[i - 1], poly[i]
                    if (y0 > py) != (y1 > py):
                        xs.append(x0 + (py - y0) * (x1 - x0) / (y1 - y0))
                xs.sort()
                spans += list(zip(xs[0::2], xs[1::2]))
            row = y * w
            for x in range(w):
                for sx in range(ss):
                    px = x + (sx + 0.5) / ss
                    if any(a <= px < b for a, b in spans):
                        cov[row + x] += unit
    return cov


def glyph(size):
    """The dspark glyph: a big sparkle and a small one, in a size x size box."""
    big = spark(size * 0.44, size * 0.56, size * 0.42)
    small = spark(size * 0.80, size * 0.20, size * 0.18)
    return [big, small]


def mono(size, rgb):
    cov = coverage(glyph(size), size, size)
    out = bytearray(size * size * 4)
    for i, c in enumerate(cov):
        out[i * 4:i * 4 + 4] = bytes((rgb[0], rgb[1], rgb[2], int(round(c * 255))))
    return png_bytes(size, size, out)


def app_icon(size):
    """Rounded square, dark blue-violet gradient, white sparkles."""
    n = size
    margin = n * 0.09
    radius = n * 0.2
    fg = coverage(glyph_scaled(n, margin), n, n, ss=2 if n >= 512 else 4)
    out = bytearray(n * n * 4)
    for y in range(n):
        for x in range(n):
            # rounded-rect alpha with a 1px soft edge
            dx = max(margin + radius - (x + 0.5), 0, (x + 0.5) - (n - margin - radius))
            dy = max(margin + radius - (y + 0.5), 0, (y + 0.5) - (n - margin - radius))
            d = math.hypot(dx, dy) - radius
            a = min(1.0, max(0.0, 0.5 - d))
            t = (x + y) / (2 * n)
            bg = (int(30 + 60 * t), int(38 + 20 * t), int(110 + 90 * t))
            f = fg[y * n + x]
            r = int(bg[0] * (1 - f) + 255 * f)
            g = int(bg[1] * (1 - f) + 236 * f)
            b = int(bg[2] * (1 - f) + 180 * f)
            out[(y * n + x) * 4:(y * n + x) * 4 + 4] = bytes((r, g, b, int(a * 255)))
    return png_bytes(n, n, out)


def glyph_scaled(n, margin):
    inner = n - 2 * margin
    pad = inner * 0.16
    box = inner - 2 * pad
    off = margin + pad
    return [[(off + x * box / 100, off + y * box / 100) for x, y in p] for p in glyph(100)]


def icns(pngs):
    """pngs: {type_code: png_bytes}; ICNS with embedded PNG payloads."""
    body = b"".join(k.encode() + struct.pack(">I", len(v) + 8) + v for k, v in pngs.items())
    return b"icns" + struct.pack(">I", len(body) + 8) + body


def ico(pngs):
    """pngs: [(size, png_bytes)]; ICO with PNG payloads."""
    head = struct.pack("<HHH", 0, 1, len(pngs))
    off = 6 + 16 * len(pngs)
    dirs, data = b"", b""
    for size, p in pngs:
        s = 0 if size >= 256 else size
        dirs += struct.pack("<BBBBHHII", s, s, 0, 0, 1, 32, len(p), off + len(data))
        data += p
    return head + dirs + data


def write(rel, data):
    path = os.path.join(ROOT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    print(f"{rel}: {len(data)} bytes")


def main():
    write("assets/tray-template.png", mono(36, (0, 0, 0)))
    write("assets/tray-template@2x.png", mono(44, (0, 0, 0)))
    write("assets/tray-linux.png", mono(36, (236, 236, 236)))
    sizes = {n: app_icon(n) for n in (32, 64, 128, 256, 512)}
    big = app_icon(1024)
    write("assets/app-icon-1024.png", big)
    write("src-tauri/icons/32x32.png", sizes[32])
    write("ui/icon.png", sizes[64 if 64 in sizes else 32])
    write("src-tauri/icons/128x128.png", sizes[128])
    write("src-tauri/icons/128x128@2x.png", sizes[256])
    write("src-tauri/icons/icon.png", sizes[512])
    write("src-tauri/icons/icon.icns",
          icns({"ic07": sizes[128], "ic08": sizes[256], "ic09": sizes[512], "ic10": big}))
    write("src-tauri/icons/icon.ico", ico([(32, sizes[32]), (128, sizes[128]), (256, sizes[256])]))


if __name__ == "__main__":
    main()
