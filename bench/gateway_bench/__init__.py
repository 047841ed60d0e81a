"""The gateway benchmark (bench.bench_gateway): its process, its rounds."""
