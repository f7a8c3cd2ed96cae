"""Example JAX programs that `hlo-tools dump`, `report`, `bench`, `heuristics
check-pass`, the tests and benchmarks/ compile: ring attention (with its per-block kernels),
a Llama-shaped TP + CP train step, the pass's test programs, the sampled permutes of
check-pass, the bench's layer stack and unrolled ring, and the parallel shapes that
mix with a ring (a pipeline, dp x cp x tp, a bidirectional ring, Ulysses, a scan over
rematerialized layers)."""
