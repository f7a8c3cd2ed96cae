"""Example JAX programs that `hlo-tools dump`, `report`, `bench`, `heuristics
check-pass`, the tests and gpu/ compile: ring attention (with its per-block kernels),
a Llama-shaped TP + CP train step, the pass's test programs, the sampled permutes of
check-pass and the bench's layer stack and unrolled ring."""
