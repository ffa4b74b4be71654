"""Engine speed without HTTP: each benchmark translates test sentences in batches, in its own processes."""
