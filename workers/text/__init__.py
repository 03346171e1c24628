"""Text helpers with no model and no store: sparse vectors, time expressions, sentences, secret detection."""
