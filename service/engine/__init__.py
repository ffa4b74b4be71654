"""The engine process: the models on ONNX Runtime, their batchers, and the socket the HTTP workers talk to."""
