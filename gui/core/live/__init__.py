"""Live: what one window frame draws.

Modules: ``store`` (``LiveStore``: one run's bounded rank rings, fed by the collector thread), ``time_buckets`` (the
merged per-second buckets of the charts), ``heat_pool`` (the pooled copies a heat map is drawn from),
``step_columns`` (bulk step loads and ``to_session_data`` exports), ``runs`` (``LiveRuns``: routing agents to runs,
their lifecycle and book-keeping), ``run_rows`` (the runs table's rows: copied under the lock, built outside it),
``snapshot`` (the immutable ``Snapshot`` a frame draws and the heuristics that build it), ``device_series`` (GPU and
host rings), ``gpu_summary`` (GPU bands over ranks), ``goodput_meter`` (goodput as the run goes), ``watch`` (the
run watcher: run states on a clock), ``replay`` (a recording reopened as ``LiveRuns``), ``live_analysis``
(whole-session analysis and cost recomputed off the GUI thread). Qt-free.
"""
