"""Live: what one window frame draws.

Modules: ``store`` (bounded ring buffers fed by the collector thread), ``snapshot`` (the immutable ``Snapshot`` a frame
draws and the heuristics that build it), ``device_series`` (GPU and host rings), ``live_analysis`` (whole-session
analysis and cost recomputed off the GUI thread). Qt-free.
"""
