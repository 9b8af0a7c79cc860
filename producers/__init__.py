"""The producer library: publish OpenLineage events to Kafka (light: confluent-kafka, fastavro, pydantic).

Public API::

    from producers import EmitterSettings, LineageEmitter, lineage_run, track_lineage

    with LineageEmitter(EmitterSettings(bootstrap_servers="127.0.0.1:9092")) as emitter:
        with lineage_run(emitter, "etl", "daily_orders", inputs=[("pg://db", "public.orders")]) as run:
            run.add_output("s3://lake", "orders_daily")

The OpenLineage client transport lives in :mod:`producers.transport` (needs openlineage-python);
the Evo ``$self`` helpers in :mod:`producers.evo`; synthetic traffic in :mod:`producers.demo`.
"""

from __future__ import annotations

from .builder import LineageRun, lineage_run, track_lineage
from .emitter import DeliveryFailure, LineageEmitter
from .evo import evo_document, publish_object_lineage, split_object_outputs
from .keys import message_key
from .metrics import ProducerMetrics
from .models import DatasetEvent, EventType, JobEvent, RunEvent, parse_event
from .settings import EmitterSettings

__all__ = [
    "EmitterSettings", "LineageEmitter", "DeliveryFailure", "ProducerMetrics", "message_key",
    "RunEvent", "DatasetEvent", "JobEvent", "EventType", "parse_event",
    "LineageRun", "lineage_run", "track_lineage",
    "evo_document", "publish_object_lineage", "split_object_outputs",
]
