"""fleetctl's benchmarks: speed of reaction and scale, each measured next to a baseline in
the same run on the same machine. Not tests: they print figures and fail only when they
could not measure. `python -m bench.run [--full] [--only NAME]`; results in bench/results/."""
