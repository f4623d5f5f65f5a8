"""Launching trainings from the app (Qt-free): specs, option table, validation, process plans, process management.

Modules: ``options`` (trainer option table), ``spec`` (LaunchSpec), ``validation`` (validate), ``plan``
(build_commands, ports), ``process`` (ManagedProcess, output buffers), ``runner`` (Launcher), ``demo`` (demo_spec).
Import from ``gui.core.launcher``, which re-exports the public API. Nothing here imports Qt or a framework.
"""
