"""What model/, export/ and service/ share, with neither PyTorch nor ONNX Runtime: the model folder's format, the
tokenizers, the search and the translate loop."""
