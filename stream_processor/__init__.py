"""The Spark Structured Streaming processor: Kafka -> decode -> dedupe -> graph (pipeline.py, writer.py)."""

import schemas._compiled  # noqa: F401 - installs the compiled modules' finder (schemas/_compiled.py) first
