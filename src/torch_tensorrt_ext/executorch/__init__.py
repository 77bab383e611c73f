"""ExecuTorch side of torch-tensorrt-ext: the delegate blob format, the runtime library loader,
the partitioner/preprocess and the program loader."""
