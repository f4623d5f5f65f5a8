"""Zero-code instrumentation: Ringscope's agent injected into an unmodified training script.

``ringscope run -- torchrun ... train.py`` (and the launch dialog's "your script" mode) start the user's command with
``injection_env``: the ``startup`` directory first on ``PYTHONPATH`` (its ``sitecustomize`` bootstrap runs in every
Python process of the training, torchrun's ranks included), one ``RINGSCOPE_RUN_ID`` for all of them and the
collector's ``RINGSCOPE_ENDPOINT``. The bootstrap imports nothing of Ringscope until a framework has finished
importing; then:

* ``torch_patch`` (PyTorch DDP): the first ``DistributedDataParallel`` built on the training thread gets the
  timing comm hook of ``ringscope.agent.torch_ddp`` (a user's later ``register_comm_hook`` is wrapped, never refused),
  the DataLoader's ``next()`` is timed, and the optimizer step ends the step.
* ``tf_patch`` (TensorFlow): ``model.fit`` under a MirroredStrategy / MultiWorkerMirroredStrategy gets
  ``RingscopeCallback``; a custom loop's ``tf.function`` that calls ``strategy.run`` is timed per call.

Every patched function falls back to the original on an internal error, and ``RINGSCOPE_DISABLE=1`` or any failure
turns the injection off with one line on stderr (``guard``). This package and ``environment``/``guard`` never import
torch or tensorflow; ``torch_patch`` and ``tf_patch`` are imported only by the bootstrap, after the framework.
"""

from ringscope.agent.inject.environment import (
    ENV_INJECT_FAULT,
    STARTUP_DIR,
    disabled_by_environment,
    injection_env,
    prepend_path,
)

__all__ = ["ENV_INJECT_FAULT", "STARTUP_DIR", "disabled_by_environment", "injection_env", "prepend_path"]
