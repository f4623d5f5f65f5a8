"""Ringscope master-node application. ``ringscope.gui.core`` is Qt-free; ``ringscope.gui.views`` and
``ringscope.gui.app`` hold the Qt code."""
