"""Ringscope benchmarks: one module per topic (``bench_<topic>.py`` with ``run(quick) -> list[dict]``).

    python -m benchmarks            # all topics, full size
    python -m benchmarks --quick    # all topics, small and fast
    python -m benchmarks ingest     # one topic
"""
