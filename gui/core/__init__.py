"""Qt-free core of the app: ingest (collector), live store, recorder, session files, analysis, reports, launcher.

Must import with PySide6 uninstalled (an import-linter contract enforces it).
"""
