"""Library comparisons behind a choice of the service's: language detectors, sentence splitters, ONNX Runtime's
decoding attention."""
