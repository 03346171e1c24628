"""OCR with rapidocr 3.x (PP-OCR detection + recognition models shipped in the wheel), on onnxruntime.

The detector sees each image (or tile) at most ``det_side`` px on its longer side (``Det.limit_type: max``;
rapidocr's default, ``min`` 736, ran a 1312x1199 screenshot at full size and upscaled small ones); recognition
reads the boxes from the full-size pixels, so only detection works on the smaller image. onnxruntime runs
on ``threads`` intra-op threads: its default pool (one thread per core) spin-waits between operators, which
cost about 1.5x the CPU per frame on 2 cores for a little less wall time.

Recognition is most of the cost (a line ~25 ms against ~0.25 s for detecting a whole 1920x1080 frame), so
``detect`` and ``recognize`` are also offered apart: changed-region OCR (``workers.media.screens``) detects lines
and recognizes only those it has not read before.
"""

from __future__ import annotations

import functools

import numpy as np

from engram.schemas.observations import OcrLine
from engram.workers.models.base import Model, ModelTask, ModelType


class RapidOcr(Model[list[OcrLine]]):
    """Text lines of an RGB image with confidence and box. Very tall images are read in overlapping tiles
    so that the detector's resize does not shrink text past legibility. Identity ``("ocr", "screen")``;
    ``predict(image, min_confidence)`` is ``read``. Options: ``threads`` (onnxruntime intra-op threads, 0: 1),
    ``det_side``."""

    model_type = ModelType.OCR
    model_task = ModelTask.SCREEN
    task = "ocr"
    tile_height = 1600
    tile_overlap = 80
    det_side = 960  # px, the detector's longer side (tuned on screens/webui and screenpipe: bench/perception_speed.py)
    rec_batch = 1  # text boxes per recognition call (rapidocr's default 6 pads each box to the batch's widest:
    # 1 cost about 30 % less CPU on screens/webui)
    min_score = 0.5  # rapidocr's ``Global.text_score``: what its full read drops, and ``recognize`` too

    def _load(self):
        from rapidocr import RapidOCR

        threads = self.options.get("threads") or 1
        return RapidOCR(
            params={
                "Global.use_cls": False,
                # its constructor sets its logger's level from here: not a warning on stderr per image with no text
                "Global.log_level": "error",
                "Det.limit_type": "max",
                "Det.limit_side_len": self.detector_side,
                "Rec.rec_batch_num": self.rec_batch,
                "EngineConfig.onnxruntime.intra_op_num_threads": threads,
                "EngineConfig.onnxruntime.inter_op_num_threads": 1,
            }
        )

    @property
    def detector_side(self) -> int:
        """The detector's longer side in px: the ``det_side`` option, else the class's ``det_side``."""
        return int(self.options.get("det_side", self.det_side))

    @functools.cached_property
    def cache_id(self) -> str:
        """Names the model, the rapidocr release that shipped it and the detector's side, e.g.
        ``pp-ocr.rapidocr-3.10.0.det960``: cached OCR results are kept under it, so neither an upgrade nor
        another detector side (which finds other boxes on the same pixels) is served text read by the other. Worked
        out once per instance (its options do not change; ``importlib.metadata`` reads the installed metadata)."""
        from importlib.metadata import version

        return f"{self.name}.rapidocr-{version('rapidocr')}.det{self.detector_side}"

    def read(self, image: np.ndarray, min_confidence: float = 0.5) -> list[OcrLine]:
        """Lines in reading order (top to bottom, left to right), each with its box ((x0, y0, x1, y1) pixels of
        ``image``) and confidence in [0, 1], those under ``min_confidence`` left out (``predict``, timed as one
        image). ``image``: uint8 (h, w, 3) RGB. Raises ModelUnavailable when rapidocr is missing."""
        return self.predict(image, min_confidence)

    def _predict(self, image: np.ndarray, min_confidence: float = 0.5) -> list[OcrLine]:
        engine = self.session
        h = image.shape[0]
        lines: list[OcrLine] = []
        step = self.tile_height - self.tile_overlap
        top = 0
        while True:
            tile = np.ascontiguousarray(image[top : top + self.tile_height, :, ::-1])  # RGB -> BGR
            with self._predict_lock:  # the steps named each call: ``detect`` leaves use_rec off in the engine
                out = engine(tile, use_det=True, use_cls=False, use_rec=True)
            if out.boxes is not None and out.txts:
                for box, text, score in zip(out.boxes, out.txts, out.scores, strict=True):
                    if score < min_confidence or not text.strip():
                        continue
                    xs, ys = box[:, 0], box[:, 1] + top
                    # lines fully inside the overlap of the previous tile were already read
                    if top and ys.max() < top + self.tile_overlap:
                        continue
                    lines.append(
                        OcrLine(
                            text=text.strip(),
                            confidence=float(score),
                            box=(float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max())),
                        )
                    )
            if top + self.tile_height >= h:
                break
            top += step
        lines.sort(key=lambda ln: (round(ln.box[1] / 12), ln.box[0]))
        return lines

    def detect(self, image: np.ndarray) -> list[np.ndarray]:
        """Text boxes of ``image`` (uint8 (h, w, 3) RGB) as the full read finds them, without reading them: each a
        float32 (4, 2) quadrilateral in ``image``'s pixels (tiled like ``read``). Timed as one image."""
        return self._timed(self._detect, 1.0, image)

    def _detect(self, image: np.ndarray) -> list[np.ndarray]:
        engine = self.session
        quads: list[np.ndarray] = []
        step = self.tile_height - self.tile_overlap
        top = 0
        while True:
            tile = np.ascontiguousarray(image[top : top + self.tile_height, :, ::-1])
            with self._predict_lock:
                out = engine(tile, use_det=True, use_cls=False, use_rec=False)
            boxes = getattr(out, "boxes", None)  # None: no text (an empty RapidOCROutput)
            for box in boxes if boxes is not None else ():
                quad = np.asarray(box, np.float32).reshape(4, 2) + np.array([0, top], np.float32)
                if not (top and quad[:, 1].max() < top + self.tile_overlap):
                    quads.append(quad)
            if top + self.tile_height >= image.shape[0]:
                break
            top += step
        return quads

    def recognize(
        self, image: np.ndarray, quads: list[np.ndarray], min_confidence: float = 0.5
    ) -> list[OcrLine | None]:
        """The text of each box of ``quads`` (from ``detect``, in ``image``'s pixels; ``image`` uint8 (h, w, 3)
        RGB), cut and read as the full read does: one ``OcrLine`` (box: the quad's bounds) per quad, in order,
        None where nothing legible was read (empty, or under ``min_score`` or ``min_confidence``). Timed as
        ``len(quads)`` items."""
        if not quads:
            return []
        return self._timed(self._recognize, float(len(quads)), image, quads, min_confidence)

    def _recognize(self, image: np.ndarray, quads: list[np.ndarray], min_confidence: float) -> list[OcrLine | None]:
        engine = self.session
        bgr = np.ascontiguousarray(image[:, :, ::-1])
        with self._predict_lock:
            crops = engine.crop_text_regions(bgr, [q.copy() for q in quads])
            out = engine.recognize_txt(crops)
        lines: list[OcrLine | None] = []
        for quad, text, score in zip(quads, out.txts, out.scores, strict=True):
            if score < max(self.min_score, min_confidence) or not text.strip():
                lines.append(None)
                continue
            lines.append(
                OcrLine(
                    text=text.strip(),
                    confidence=float(score),
                    box=(
                        float(quad[:, 0].min()),
                        float(quad[:, 1].min()),
                        float(quad[:, 0].max()),
                        float(quad[:, 1].max()),
                    ),
                )
            )
        return lines
