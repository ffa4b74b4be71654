"""What several benchmarks share: defaults, test sentences, engines, engine processes, timing, the machine, reports,
and CTranslate2's conversion of our checkpoints."""
