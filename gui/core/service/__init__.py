"""The ingest process and its window-side client: the collector, live runs, recorder, run watcher and metrics
endpoint run in a process of their own; the window draws compact frames it receives from there.

``process.IngestProcess`` starts the process, calls it and restarts it after a crash; ``frame_channel`` pipelines
its frames; ``remote`` holds the stand-ins (``RemoteRuns`` / ``RemoteStore`` / ``RemoteRecorder`` / ...) for the
in-process objects the window used; ``calls`` declares what the window may call or set there; ``server`` is the
process; ``frames`` is the snapshot delta codec.
"""
