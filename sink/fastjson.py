"""JSON on the hot paths: moved to :mod:`schemas.fastjson` (the codec parses envelopes with it too)."""

from schemas.fastjson import (
                              HAVE_ORJSON,
                              OrjsonError,
                              dumps_compact,
                              dumps_sorted,
                              dumps_sorted_utf8,
                              json_compact,
                              loads,
                              orjson_key,
)

__all__ = ["loads", "dumps_compact", "dumps_sorted", "dumps_sorted_utf8", "json_compact", "orjson_key", "OrjsonError", "HAVE_ORJSON"]
