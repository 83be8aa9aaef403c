// Package soak marks the load, scale and soak tests — 100,000 leases, a
// thousand waiters on one key, long model-checker budgets — that `make ci`
// leaves to `make soak`. Every correctness check stays in `make ci`; what
// moves out is evidence that the same mechanisms hold at size, which costs
// minutes and proves nothing the shorter runs do not at the level of a
// single interleaving.
package soak
