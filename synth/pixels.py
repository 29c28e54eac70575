"""Pixel patterns of the synthetic images: a retina-like OCT cube and a colour fundus photo.

Seeded numpy generators only, so the same seed gives the same pixels.
"""

from __future__ import annotations

import numpy as np


def oct_volume(shape: tuple[int, int, int], seed: int) -> np.ndarray:
    """A retina-like OCT cube (frames, depth, width): bright RNFL and RPE bands, a foveal
    pit in the middle B-scans, fading choroid and speckle. One frame at a time keeps big
    benchmark volumes (49 x 496 x 512) cheap on memory."""
    frames, rows, cols = shape
    rng = np.random.default_rng(seed)
    x = np.linspace(-1.0, 1.0, cols, dtype=np.float32)[None, :]
    depth = np.linspace(0.0, 1.0, rows, dtype=np.float32)[:, None]
    out = np.empty(shape, dtype=np.uint8)
    for f in range(frames):
        z = -1.0 + 2.0 * f / max(frames - 1, 1)
        pit = 0.07 * np.exp(-(x**2 + z**2) / 0.04)
        top = 0.32 - 0.06 * x**2 + pit  # inner limiting membrane, dipping at the fovea
        rpe = 0.62 - 0.06 * x**2  # retinal pigment epithelium; both curve up at the edges
        below = depth - top
        img = np.full((rows, cols), 12.0, dtype=np.float32)
        img = np.where((below >= 0) & (depth < rpe), 70.0 + 40.0 * np.cos(below * 60.0), img)
        img = np.where((below >= 0) & (below < 0.035 * (1 - pit / 0.07)), 210.0, img)  # RNFL
        img = np.where((depth >= rpe) & (depth < rpe + 0.035), 235.0, img)  # RPE
        img = np.where(depth >= rpe + 0.035, 130.0 * np.exp(-(depth - rpe) / 0.15), img)
        img *= rng.gamma(4.0, 0.25, size=(rows, cols)).astype(np.float32)  # speckle
        out[f] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def fundus_photo(shape: tuple[int, int], laterality: str, seed: int) -> np.ndarray:
    """A colour fundus (rows, cols, RGB): orange disc of retina, yellow optic disc on the
    nasal side (right of the image for a right eye), darker macula, dark vessel arcs."""
    rows, cols = shape
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[-1.0 : 1.0 : rows * 1j, -1.0 : 1.0 : cols * 1j]
    r = np.sqrt(xx**2 + yy**2)
    disc_x = 0.4 if laterality == "R" else -0.4
    shade = np.clip(1.0 - 0.5 * r**2, 0, 1)
    rgb = np.stack([200 * shade, 85 * shade, 35 * shade], axis=-1)
    rgb *= (1 - 0.35 * np.exp(-(xx**2 + yy**2) / 0.02))[..., None]  # macula
    disc = np.exp(-((xx - disc_x) ** 2 + yy**2) / 0.008)[..., None]
    rgb += disc * np.array([55.0, 150.0, 90.0])
    for bend in (1.2, -1.2, 0.6, -0.6):
        curve = 0.5 * bend * (xx - disc_x) ** 2 + 0.03 * np.sign(bend)  # arcades above/below
        vessel = (np.abs(yy - curve) < 0.012 + 0.01 * np.exp(-np.abs(xx - disc_x)))[..., None]
        rgb = np.where(vessel, rgb * np.array([0.65, 0.45, 0.45]), rgb)
    rgb += rng.normal(0.0, 3.0, size=rgb.shape)
    rgb[r > 0.97] = 0  # outside the camera's circular field
    return np.clip(rgb, 0, 255).astype(np.uint8)
