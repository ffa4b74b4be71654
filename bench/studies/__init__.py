"""Library comparisons behind a choice of the service's: language detectors, sentence splitters, attention
kernels."""
