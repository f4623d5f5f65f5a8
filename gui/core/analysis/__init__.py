"""Analysis: what the numbers mean. Pure rules over recorded data (``SessionData``); the live runs apply the same rules
as steps arrive, so this package sits below ``live`` and never imports it (nor ``report``, nor Qt).

Modules: ``summary`` (phase shares, throughput, GPU statistics, data quality: ``analyze`` -> ``SessionAnalysis``),
``straggler`` (who makes the others wait, and why), ``network`` (per-host links and queueing), ``hang`` (the hang
rule), ``runs`` (runs and their states), ``attempts`` and ``goodput`` (restarts and what they cost), ``stacks`` (stack
dumps folded), ``cost`` (the money model), ``recommendations`` (plain-language advice tied to a number), ``compare``
(two sessions side by side), ``info`` (what ``ringscope info`` prints), ``quantiles`` (medians and percentiles over
measured values).
"""
