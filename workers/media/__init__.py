"""Media in, text and signals out: decoding and type detection, conversation formats and importers,
speech, vision, screens, upload bounds."""
