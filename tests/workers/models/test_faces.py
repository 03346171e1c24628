"""Faces through dlib directly (no ``face_recognition``): the descriptors are those ``face_recognition`` gave
(pinned values measured with it), people of the deepface set are told apart at dlib's 0.6, the CNN detector finds
a turned face HOG misses, and nothing process-wide (PIL's truncated-image flag) is changed by loading the model."""

from __future__ import annotations

import csv
import sys

import numpy as np
import pytest
from PIL import Image, ImageFile

from engram.schemas.settings import Settings
from engram.workers.models import DlibFaces, ModelTask, ModelType, get_model
from engram.workers.models.faces import SAME_PERSON_DISTANCE, face_distance

PEOPLE = [
    "img1.jpg",
    "img2.jpg",
    "img4.jpg",
    "img16.jpg",
    "img33.jpg",
    "img38.jpg",
    "img39.jpg",
    "img40.jpg",
    "img53.jpg",
]


@pytest.fixture(scope="module")
def faces() -> DlibFaces:
    return get_model("faces", Settings())


def _rgb(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def test_the_descriptor_is_the_one_face_recognition_gave(faces, eval_data):
    """img1.jpg (1382x1868, detected on its 758x1024 copy): box and first values of the descriptor as
    ``face_recognition.face_encodings(model="large")`` computed them on the same dlib (68 landmarks; the 5-point
    model would move the descriptor by about 0.11)."""
    [[face]] = faces.detect([_rgb(eval_data / "faces" / "deepface" / "img1.jpg")])
    assert face.box == pytest.approx((439.63671875, 375.7890625, 1025.2109375, 961.36328125))
    assert len(face.embedding) == 128 and face.frame_s is None
    assert face.embedding[:4] == pytest.approx([-0.154014, 0.044179, 0.129926, -0.081753], abs=1e-4)
    assert float(np.linalg.norm(face.embedding)) == pytest.approx(1.580561, abs=1e-4)
    assert "face_recognition" not in sys.modules
    assert not ImageFile.LOAD_TRUNCATED_IMAGES  # face_recognition's import set it for the whole process


def test_people_of_the_deepface_set_are_told_apart(faces, eval_data):
    folder = eval_data / "faces" / "deepface"
    found = faces.detect([_rgb(folder / name) for name in PEOPLE])
    vectors = {name: f[0].embedding for name, f in zip(PEOPLE, found, strict=True) if len(f) == 1}
    assert set(vectors) == set(PEOPLE)  # one face each
    pairs = [
        (r["file_x"].rsplit("/", 1)[-1], r["file_y"].rsplit("/", 1)[-1], r["decision"] == "Yes")
        for r in csv.DictReader((folder / "face-recognition-pivot.csv").open())
    ]
    pairs = [(x, y, same) for x, y, same in pairs if x in vectors and y in vectors]
    assert sum(same for *_, same in pairs) >= 5 and sum(not same for *_, same in pairs) >= 5
    for x, y, same in pairs:
        assert (face_distance(vectors[x], vectors[y]) < SAME_PERSON_DISTANCE) == same, (x, y)


def test_the_cnn_detector_finds_a_turned_face_hog_misses(faces, eval_data):
    img = Image.open(eval_data / "faces" / "deepface" / "img11_reflection.jpg").convert("RGB").rotate(40, expand=True)
    img.thumbnail((640, 360))
    frame = Image.new("RGB", (640, 360), "gray")
    frame.paste(img, (0, 0))
    frame = np.asarray(frame)
    assert faces.detect([frame], [1.5], cnn_fallback=False) == [[]]
    [[face]] = faces.detect([frame], [1.5], cnn_fallback=True)
    assert face.frame_s == 1.5 and len(face.embedding) == 128
    assert 0 <= face.box[0] < face.box[2] <= img.width and 0 <= face.box[1] < face.box[3] <= img.height


def test_identity_and_bad_input(faces):
    assert faces.identity() == (ModelType.FACES, ModelTask.DETECT_EMBED) == ("faces", "detect+embed")
    assert faces.detect([]) == []
    assert faces.detect([np.zeros((60, 90, 3), np.uint8)]) == [[]]
    with pytest.raises(ValueError, match="2 frames but 1 times"):
        faces.detect([np.zeros((60, 90, 3), np.uint8)] * 2, [0.0])
