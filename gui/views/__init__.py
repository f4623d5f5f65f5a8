"""Qt views. The only package (with gui.app) that imports PySide6 / pyqtgraph."""
