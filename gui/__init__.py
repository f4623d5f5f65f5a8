"""Ringscope master-node application. ``gui.core`` is Qt-free; ``gui.views`` and ``gui.app`` hold the Qt code."""
