// Command faultmatrix turns `go test -json` output of the backends'
// conformance runs into a Markdown matrix of check × backend: pass, FAIL,
// documented (unsafe or not live, with the reason) or n/a (with the reason).
//
//	go test -json -run 'TestConformance' ./... | go run ./internal/tools/faultmatrix > docs/FAULTS.md
package main
