"""The HTTP front door: OpenLineage ingest, a Marquez-compatible read API, our own graph API and the web UI.

:func:`api.app.create_app` builds the ASGI application from :class:`api.settings.ApiSettings`;
``lineage serve`` (and ``lineage up``) run it under uvicorn.
"""

__all__: list[str] = []
