"""The TensorFlow side of profiles on demand (``ringscope.agent.profiling``): TensorFlow's own profiler
(``tf.profiler.experimental``), its output kept in TensorBoard's layout
(``<dir>/plugins/profile/<run>/<host>.xplane.pb``), so that ``tensorboard --logdir <dir>`` opens it in the Profile tab.

TensorFlow writes XPlane protobufs; turning them into a Chrome trace or an operator table needs TensorBoard's
profile plugin, which is not a dependency here: the answer names the folder, and ``ringscope profile`` copies it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class TfProfiler:
    """``ProfilerBackend`` for TensorFlow (one per process: its profiler is process-wide)."""

    framework = "tensorflow"

    def __init__(self) -> None:
        self._logdir: Path | None = None

    def start(self) -> Any:
        import tempfile

        import tensorflow as tf

        self._logdir = Path(tempfile.mkdtemp(prefix="tf-profile-"))
        tf.profiler.experimental.start(str(self._logdir))
        return self._logdir

    def stop(self, handle: Any) -> None:
        import tensorflow as tf

        tf.profiler.experimental.stop()

    def export(self, handle: Any, folder: Path, rank: int) -> dict[str, Any]:
        import shutil

        target = folder / f"tensorboard-rank{rank}"
        shutil.move(str(handle), target)
        planes = sorted(str(p.relative_to(target)) for p in target.rglob("*.xplane.pb"))
        return {"trace": str(target), "format": "tensorboard", "files": planes, "top_ops": []}
