"""Qt views. The only package (with ringscope.gui.app) that imports PySide6 / pyqtgraph."""
