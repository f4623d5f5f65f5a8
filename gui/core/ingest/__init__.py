"""Ingest: what arrives from agents and where it is kept.

Modules: ``sink`` (the ``IngestSink`` contract, ``Gap``, ``Rejection``, ``IngestCounters``), ``collector`` (the ZeroMQ
ROUTER end: the receive thread, fan-out to the sinks, acks and the reply path), ``admission`` (the session's caps and
each agent's sequence numbers: refusals, duplicates, gaps, late joiners), ``socket_setup`` (bind-address rules, the
open-file limit, the CURVE server), ``agent_settings`` (what each agent is asked to set when it says hello: the
collector's settings, a flush interval by the run's size), ``requests`` (the requests in flight to agents and their
answers), ``ask`` (a tool's side of a request), ``recorder`` (the SQLite session writer), ``recorder_process`` (the
same writer in a child process, fed the messages' bytes: the window's ingest process records with it),
``session_schema`` (the
session file's tables: what the recorder writes by and the reader reads by), ``session_reader`` (reading a file back
as ``SessionData``), ``blocks`` (columnar copies of the step rows), ``transit`` (each agent's queueing delay),
``clocks`` (the agents' clocks put on the collector's), ``access`` (where the collector's CURVE keys and the agent
token live). Qt-free.
"""
