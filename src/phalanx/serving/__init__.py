"""`phalanx serve NAME@alias`: a registered ONNX model over HTTP (ONNX Runtime), following its alias.

- follower.py: the model version being served, reloaded when the alias moves (no request dropped)
- codec.py: request bodies (JSON, .npy, .npz) -> arrays checked against the signature, and back
- batching.py: dynamic batching of concurrent requests (max batch size, max wait)
- app.py: the HTTP endpoint (predict, /healthz, /metrics, the token)

See docs/models.md.
"""
