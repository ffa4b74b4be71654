"""The HTTP worker process: FastAPI in front of the engine, which it reaches through service.protocol; never
ONNX Runtime."""
