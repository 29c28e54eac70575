"""Where text is in a frame, found by a learned detector: PP-OCRv4's text detector (a DB network), no words read.

Tesseract reads words; what it does not recognise as letters (a face it was never shown, a line up a margin, grey
on the speckle) it reads as nothing, and so did the screening built around it (issue 44: text in fonts and places
its corpus lacked published unchanged). A text detector is trained to find text regions in any face and at any
angle without reading them. PaddleOCR's PP-OCRv4 detector is shipped as an ONNX file inside the
`rapidocr-onnxruntime` wheel (locked), so nothing is downloaded at run time; it runs on ONNX Runtime, one
intra-op thread (the Spark tasks are the parallelism), loaded once per process (`_session`, kept).

Only the model file and ONNX Runtime are used, not rapidocr's Python code: rapidocr imports OpenCV, whose `cv2`
needs the system's libGL, which a fresh headless machine lacks (the demo and CI must run on one with only Python
and Java). The wheel is found without importing it (`importlib.util.find_spec`), and the network's pre- and
post-processing are here in NumPy and SciPy: the frame resized (longer side at most `max_side`, each side a
multiple of 32) and scaled to [-1, 1] as rapidocr does; the network's per-pixel text probability thresholded at
`threshold`, the map dilated by 2 x 2, its 8-connected regions boxed, a box kept when its mean probability is at
least `box_threshold`, and grown by `unclip` (DB's shrunk kernel: area x unclip / perimeter on every side), as
rapidocr's DBPostProcess does with OpenCV contours, except that the boxes are upright rectangles (a rotated
line is boxed whole; the covering is upright too).
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

MODEL_PACKAGE = "rapidocr_onnxruntime"  # rapidocr-onnxruntime 1.4.4 (requirements.lock)
MODEL_FILE = "models/ch_PP-OCRv4_det_infer.onnx"
MODEL_NAME = "PP-OCRv4 det"
MULTIPLE = 32  # the network's input sides are multiples of this
MIRROR = 16  # pixels of the frame mirrored out at each edge before the network reads it (`TextRegions.find`)
# A larger input is read in tiles of at most TILE x TILE, each with OVERLAP pixels of context either side of the part
# it answers for: the network's working memory grows with its input (a 1955 x 1841 frame read whole ran a Spark
# worker out of its 2 GB address space), so a tile bounds it whatever the frame's size.
TILE = 1024
OVERLAP = 64


@dataclass(frozen=True)
class Region:
    """A box of a frame where the detector sees text, in the frame's pixels, and its mean text probability."""

    top: int
    left: int
    height: int
    width: int
    score: float

    @property
    def vertical(self) -> bool:
        """Taller than wide: a line up or down a margin (or a single character)."""
        return self.height > self.width


def model_path() -> Path:
    """The detector's ONNX file inside the installed rapidocr-onnxruntime package, found without importing the
    package (its `__init__` imports OpenCV). RuntimeError when it is not installed."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return path
    raise RuntimeError(f"no text detector model: the lock file installs it ({MODEL_PACKAGE.replace('_', '-')}, "
                       f"{MODEL_FILE}); run ./platform/setup.sh")


_LOCK = threading.Lock()


@lru_cache(maxsize=2)
def _session(path: str, threads: int):
    """One ONNX Runtime session per model file and thread count per process, made on first use and kept (a Spark
    Python worker is reused for its next task, so the model loads once per worker, as Tesseract's does)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: its warnings would go to the executors' stderr
    # Frames of many sizes: an arena sized for the largest would be kept for the process's life.
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def loaded() -> int:
    """Sessions made in this process (a test shows the model is loaded once, not per file)."""
    return _session.cache_info().currsize


class TextRegions:
    """The detector with its settings; cheap to make (the model is the process's, `_session`)."""

    def __init__(self, max_side: int = 1024, threshold: float = 0.3, box_threshold: float = 0.5,
                 unclip: float = 1.6, min_side: int = 3, threads: int = 1):
        self.max_side, self.threshold, self.box_threshold = max_side, threshold, box_threshold
        self.unclip, self.min_side, self.threads = unclip, min_side, threads
        self.path = str(model_path())

    @property
    def session(self):
        with _LOCK:
            return _session(self.path, self.threads)

    def probability(self, image: np.ndarray, max_side: int | None = None) -> tuple[np.ndarray, float, float]:
        """The network's text probability per pixel of `image` (8-bit grey, or RGB) resized to at most `max_side`
        (default: the detector's) on its longer side; and the (row, column) factors from the map to the image."""
        side = max_side or self.max_side
        rows, cols = image.shape[:2]
        scale = min(1.0, side / max(rows, cols))
        height = max(MULTIPLE, round(rows * scale / MULTIPLE) * MULTIPLE)
        width = max(MULTIPLE, round(cols * scale / MULTIPLE) * MULTIPLE)
        if (height, width) != (rows, cols):
            from PIL import Image

            image = np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize((width, height), Image.BILINEAR))
        return self._tiled(image), rows / height, cols / width

    def _tiled(self, image: np.ndarray) -> np.ndarray:
        """The probability map of `image` (sides multiples of MULTIPLE), read whole when it fits a tile, else tile by
        tile: each tile's answer kept only for its core, away from the tile's cut edges."""
        height, width = image.shape[:2]
        if height <= TILE and width <= TILE:
            return self._run(image)
        out = np.empty((height, width), np.float32)
        core = TILE - 2 * OVERLAP  # a multiple of MULTIPLE, as every tile's origin and size are
        for top in range(0, height, core):
            for left in range(0, width, core):
                t0, l0 = max(0, top - OVERLAP), max(0, left - OVERLAP)
                t1, l1 = min(height, t0 + TILE), min(width, l0 + TILE)
                b, r = min(height, top + core), min(width, left + core)
                out[top:b, left:r] = self._run(image[t0:t1, l0:l1])[top - t0:b - t0, left - l0:r - l0]
        return out

    def _run(self, image: np.ndarray) -> np.ndarray:
        """The network on one input (8-bit grey or RGB, sides multiples of MULTIPLE): its probability map."""
        height, width = image.shape[:2]
        if image.ndim == 2:
            tensor = np.broadcast_to(image.astype(np.float32)[None, None], (1, 3, height, width))
        else:  # the network was trained on OpenCV's BGR order
            tensor = image[..., 2::-1].astype(np.float32).transpose(2, 0, 1)[None]
        tensor = np.ascontiguousarray(tensor) / np.float32(127.5) - np.float32(1.0)
        session = self.session
        return session.run(None, {session.get_inputs()[0].name: tensor})[0][0, 0]

    def find(self, image: np.ndarray, max_side: int | None = None, pad: int = MIRROR) -> list[Region]:
        """The text regions of an 8-bit grey or RGB frame, in its pixels (empty: no text seen). The frame is first
        mirrored `pad` pixels out at every edge (its size limit grown alike): a line an edge cuts through its
        letters then shows whole letters, mirrored, where the network sees a line (on the tuning half's
        photographs, 18 of 18 such lines found, 14 without; no clean image more)."""
        if image.shape[0] < 8 or image.shape[1] < 8:
            return []
        side = max_side or self.max_side
        if pad:
            side = round(side * (max(image.shape[:2]) + 2 * pad) / max(image.shape[:2]))
            image = np.pad(image, ((pad, pad), (pad, pad)) + ((0, 0),) * (image.ndim - 2), mode="symmetric")
        probability, fy, fx = self.probability(image, side)
        rows, cols = image.shape[0] - 2 * pad, image.shape[1] - 2 * pad
        out = []
        for top, left, h, w, s in boxes(probability, self.threshold, self.box_threshold, self.unclip, self.min_side):
            t, lf = max(0, int(top * fy) - pad), max(0, int(left * fx) - pad)
            b, r = min(rows, round((top + h) * fy) - pad), min(cols, round((left + w) * fx) - pad)
            if b > t and r > lf:
                out.append(Region(t, lf, b - t, r - lf, s))
        return out


def boxes(probability: np.ndarray, threshold: float, box_threshold: float, unclip: float,
          min_side: int = 3) -> list[tuple[int, int, int, int, float]]:
    """DB's post-processing on a probability map, upright: (top, left, height, width, score) in the map's pixels,
    clipped to it."""
    from scipy import ndimage as ndi

    bitmap = probability > threshold
    if not bitmap.any():
        return []
    dilated = bitmap.copy()  # a 2 x 2 dilation (OpenCV's anchor: the kernel's top-left pixel grows down-right)
    dilated[1:] |= bitmap[:-1]
    dilated[:, 1:] |= dilated[:, :-1].copy()
    labels, count = ndi.label(dilated, structure=np.ones((3, 3), dtype=bool))
    if not count:
        return []
    rows, cols = probability.shape
    out = []
    for found in ndi.find_objects(labels)[:1000]:
        if found is None:
            continue
        top, bottom, left, right = found[0].start, found[0].stop, found[1].start, found[1].stop
        height, width = bottom - top, right - left
        if min(height, width) < min_side:
            continue
        # The box's own mean, summed where it lies (a summed-area table of the whole map would be twice the map's
        # size in float64: 47 MB for a 640 x 1024 mean enlarged three times).
        score = float(probability[top:bottom, left:right].mean(dtype=np.float64))
        if score < box_threshold:
            continue
        grow = height * width * unclip / (2 * (height + width))
        t, lf = max(0, int(top - grow)), max(0, int(left - grow))
        b, r = min(rows, int(np.ceil(bottom + grow))), min(cols, int(np.ceil(right + grow)))
        if min(b - t, r - lf) < min_side + 2:
            continue
        out.append((t, lf, b - t, r - lf, float(score)))
    return out


__all__ = ["MODEL_NAME", "Region", "TextRegions", "boxes", "loaded", "model_path"]
