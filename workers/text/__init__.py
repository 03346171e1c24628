"""Text helpers with no model and no store: sparse vectors, time expressions, sentences, secret detection, short
values compared as phrases."""
