"""The ingest process and its window-side client: the collector, live runs, recorder, run watcher and metrics
endpoint run in a process of their own; the window draws compact frames it receives from there.

``client.IngestProcess`` starts and talks to it (``RemoteRuns`` / ``RemoteStore`` / ``RemoteRecorder`` stand in
for the in-process objects the window used); ``server`` is the process; ``frames`` is the snapshot delta codec.
"""
