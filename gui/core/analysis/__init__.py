"""Analysis: what the numbers mean.

Modules: ``summary`` (phase shares, throughput, GPU statistics, data quality: ``analyze`` -> ``SessionAnalysis``),
``straggler`` (who makes the others wait, and why), ``cost`` (the money model), ``recommendations`` (plain-language
advice tied to a number), ``compare`` (two sessions side by side). Qt-free.
"""
