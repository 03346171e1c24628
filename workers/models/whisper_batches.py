"""faster-whisper's ``WhisperModel`` for batched decoding on a CPU: the batch is decoded together, but encoded and
word-aligned one piece at a time.

``BatchedInferencePipeline`` (faster-whisper) encodes its batch of 30 s pieces in one CTranslate2 call, decodes them
together and aligns their words in one call. On one CPU thread only the decoding gains from the batch: the
encoder costs more per piece in a batch (tiny.en int8, measured on 2 cores: 0.39 s per piece alone, 0.44 in a
batch of 4, 0.50 in a batch of 8: the activations of 8 x 1500 frames leave the caches), and so does the alignment
(the batch's token lists padded to the longest). ``PieceWiseWhisper`` overrides the two public methods the
pipeline calls for them, ``encode`` and ``find_alignment``, to run each piece alone and hand the pipeline the
same batch-shaped results: the words and timestamps are identical (checked on the 180 s and 300 s bench
recordings), the ASR CPU of a 180 s recording 5.5 s -> 4.2-5.0 s, 300 s 8.8 s -> 8.4 s. The sequential path
(``WhisperModel.transcribe``) encodes one window at a time anyway and is unchanged.
"""

from __future__ import annotations

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer


def _storage(array: np.ndarray) -> ctranslate2.StorageView:
    return ctranslate2.StorageView.from_array(np.ascontiguousarray(array))


class PieceWiseWhisper(WhisperModel):
    """A ``WhisperModel`` (same constructor) whose batched ``encode`` and ``find_alignment`` run one piece at a
    time on the CPU (module docstring). Inputs and outputs keep the library's shapes."""

    def encode(self, features: np.ndarray) -> ctranslate2.StorageView:
        """Encoder output (batch, frames / 2, d_model) of log-mel ``features`` (batch, n_mels, frames) or
        (n_mels, frames), each piece through the encoder alone and the outputs stacked."""
        if features.ndim < 3 or len(features) < 2:
            return super().encode(features)
        return _storage(np.concatenate([np.asarray(super(PieceWiseWhisper, self).encode(f)) for f in features]))

    def find_alignment(
        self,
        tokenizer: Tokenizer,
        text_tokens: list,
        encoder_output: ctranslate2.StorageView,
        num_frames,
        median_filter_width: int = 7,
    ) -> list:
        """Per piece, the word alignment of ``text_tokens[i]`` (token ids) against ``encoder_output[i]`` over
        ``num_frames[i]`` frames (the library's list of word dicts per piece), aligned piece by piece; a single
        piece (``num_frames`` an int, from the sequential path) goes to the library as it is."""
        if not isinstance(num_frames, list | tuple) or len(text_tokens) < 2:
            return super().find_alignment(tokenizer, text_tokens, encoder_output, num_frames, median_filter_width)
        encoded = np.asarray(encoder_output)
        out: list = []
        for i, tokens in enumerate(text_tokens):
            if not tokens:
                out.append([])  # what the library returns for a piece without words
                continue
            out.extend(
                super().find_alignment(
                    tokenizer, [tokens], _storage(encoded[i : i + 1]), [num_frames[i]], median_filter_width
                )
            )
        return out
