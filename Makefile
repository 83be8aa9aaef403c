# One entry point for humans and CI. `make ci` is what .ci/run runs and what
# the README gives as the test command for a fresh Debian/Ubuntu machine.
GO ?= go

.PHONY: ci deps check warm test tests quick soak bench bench-peers demo faults

# The install and the compilation of every test dependency with the race
# detector (warm) run at once; then the tests, with formatting and vet
# beside them (the tests wait on servers and leases far more than on the
# CPU, and vet's compilation, without the race detector, would otherwise
# come first: minutes on a machine with an empty build cache).
ci:
	@$(MAKE) --no-print-directory -j2 --output-sync=target deps warm
	@$(MAKE) --no-print-directory tests CHECK_BESIDE=1

# Install redis-server, memcached, ZooKeeper, MariaDB, PostgreSQL and etcd
# from Debian's packages, with sudo when not root (the tests start their
# own private instances).
deps:
	bash scripts/install-deps.sh

# Formatting and vet (the library, the peer benchmark module in bench/, the
# OpenTelemetry module in otel/ and the gocron adapter in gocronlock/).
check:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt -l:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd otel && $(GO) vet ./...
	cd gocronlock && $(GO) vet ./...

# The whole test suite with the race detector (FuzzOpen's seed corpus —
# every registered scheme, every URL in the docs, the malformed ones —
# included), the OpenTelemetry module's and the gocron adapter's tests (each
# its own go.mod), and the patched ZooKeeper client's own regression test
# (third_party/go-zookeeper-zk/README.distlock.md). The packages whose
# tests take minutes run three at a time, longest first; beside them the
# others, one at a time (scripts/test-packages.sh slow and rest: together
# the same set as ./...). Most tests wait on servers and leases, not on the
# CPU, and a small package's time is mostly the link of its test binary. Server data lives on tmpfs where
# the machine has one (scripts/with-tmpfs.sh). The conformance suites' load
# checks run a quarter of their critical sections (DISTLOCK_CONFORMANCE_ROUNDS;
# `make soak` runs four times the default).
test: check
	@$(MAKE) --no-print-directory tests

# Compiles the three modules' packages, and what their tests import, with
# the race detector into the build cache, for the tests (linking nothing:
# links are not cached).
warm:
	for m in . otel gocronlock; do \
		(cd $$m && $(GO) build -race ./... && \
		$(GO) build -race $$($(GO) list -f '{{join .TestImports "\n"}}{{"\n"}}{{join .XTestImports "\n"}}' ./... | sort -u | grep -v '^github.com/distlock/')) || exit 1; \
	done

# The tests alone (test without check). The OpenTelemetry and gocron
# modules' tests, which need no server and little time, run beside the
# library's.
tests:
	DISTLOCK_CONFORMANCE_ROUNDS=0.25 scripts/with-tmpfs.sh scripts/run-all.sh \
		"$(GO) test -race -count=1 -p 3 -timeout 25m $$(scripts/test-packages.sh slow)" \
		"$(GO) test -race -count=1 -p 1 -timeout 25m $$(scripts/test-packages.sh rest)" \
		"cd otel && $(GO) test -race -count=1 ./..." \
		"cd gocronlock && $(GO) test -race -count=1 ./..." \
		"cd third_party/go-zookeeper-zk && $(GO) test -race -count=1 ./..." \
		$(if $(CHECK_BESIDE),"$(MAKE) --no-print-directory check")

# The contributor's inner loop: every test that needs no server, in a
# minute or two (no race detector, no servers, no installs).
quick:
	$(GO) test -short -count=1 ./...

# The whole suite plus the load, scale and soak runs that `make ci` leaves
# out (internal/testkit/soak): 100,000 leases, a thousand waiters on one
# key, the model checker's long budget.
# Then FuzzOpen mutates URLs for two minutes (no panic, no hang, no
# password in an error); its seeds run in every `go test`.
soak: deps
	DISTLOCK_SOAK=1 DISTLOCK_CONFORMANCE_ROUNDS=4 scripts/with-tmpfs.sh $(GO) test -race -count=1 -timeout 90m ./...
	$(GO) test -run '^$$' -fuzz FuzzOpen -fuzztime 2m ./internal/tests/openfuzz

# The benchmarks quoted in the README.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The main job on the embedded default backend (goroutines of one process),
# then two processes serialized by `distlock run` through file:// (a lock
# directory, no server): the second starts its command only after the first
# has finished.
demo:
	$(GO) run ./examples/quickstart
	@echo '--- two processes, one lock: distlock run --backend file://DIR'
	@tmp=$$(mktemp -d) && $(GO) build -o $$tmp/distlock ./cmd/distlock && \
	for p in A B; do \
		$$tmp/distlock run --backend "file://$$tmp" --key demo -- \
			sh -c "echo \"process $$p (pid \$$\$$) holds the lock\"; sleep 1; echo \"process $$p releases it\"" & \
	done; wait; $$tmp/distlock status --backend "file://$$tmp" demo; rm -rf "$$tmp"

# The conformance and fault matrix (check × backend), written to
# docs/FAULTS.md from one run of every backend's conformance suite.
faults:
	@mkdir -p docs
	$(GO) test -json -count=1 -timeout 25m -run 'TestConformance' ./... > docs/faults.jsonl || true
	$(GO) run ./internal/tools/faultmatrix -command "make faults" < docs/faults.jsonl > docs/FAULTS.md
	@rm -f docs/faults.jsonl
	@echo wrote docs/FAULTS.md

# distlock vs bsm/redislock and redsync, side by side on private
# redis-servers, and every backend's scale run (memcached, ZooKeeper and
# MariaDB from deps); writes bench/RESULTS.md and bench/handoff.svg; then
# distlock etcd vs concurrency.Mutex on a private 3-member etcd cluster,
# written to bench/ETCD.md. The
# peers live in bench/'s own go.mod, never in the library's.
bench-peers: deps
	cd bench && $(GO) run ./cmd/peers -rounds 3
	cd bench && $(GO) run ./cmd/peers -etcd -rounds 3 | tee ETCD.md
