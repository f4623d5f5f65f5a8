"""The directory ``ringscope run`` puts first on ``PYTHONPATH``: it holds only the ``sitecustomize`` bootstrap.

Python imports ``sitecustomize`` at start-up from the first ``sys.path`` entry that has one, so every Python process
started with this directory on ``PYTHONPATH`` (torchrun's launcher, each rank, a plain ``python train.py``) runs the
bootstrap before the user's script. This package file exists so that the directory ships with the ``agent``
package; it is never imported at start-up.
"""
