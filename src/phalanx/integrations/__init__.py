"""Phalanx inside the training code people already have: TensorBoard, Lightning, Keras.

Each integration is its own module and its framework an optional extra (``pip install
phalanx[lightning]``); nothing here is imported until a script imports it, so ``import phalanx``
and the standard-library-only SDK (``phalanx.tracking``) stay as light as before. See
docs/integrations.md.
"""
