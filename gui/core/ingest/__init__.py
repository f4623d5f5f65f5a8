"""Ingest: what arrives from agents and where it is kept.

Modules: ``sink`` (the ``IngestSink`` contract, ``Gap``, ``Rejection``, ``IngestCounters``), ``collector`` (the ZeroMQ
ROUTER end: validation, acks, requests), ``requests`` (the requests in flight to agents and their answers), ``ask``
(a tool's side of a request), ``recorder`` (the SQLite session writer), ``session`` (the session file layout and
reading it back as ``SessionData``), ``access`` (where the collector's CURVE keys and the agent token live). Qt-free.
"""
