"""How good a model folder is as the service runs it (ONNX Runtime): corpus scores and robustness on everyday input."""
