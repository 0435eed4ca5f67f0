# Waitroom — build, test and demo targets. `make help` lists them.
GO ?= go
BIN := bin

.PHONY: help build test test-go vet fuzz bench-go clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# One go build for several commands compiles their shared packages once and
# keeps both cores busy, where one build after another does not.
build: ## build Caddy with the waitroom module and the origin (bin/caddy, bin/origin)
	$(GO) build -o $(BIN)/ ./cmd/caddy ./cmd/origin

test: ## run every test against private Redis (one server and a 3-master cluster) and PostgreSQL servers
	scripts/services.sh scripts/cluster.sh $(MAKE) --no-print-directory test-go

# The race detector is on for every package (RACE= turns it off); what it
# costs is in docs/development.md.
RACE ?= -race
test-go: vet ## run the tests against REDIS_URL and DATABASE_URL
	GO=$(GO) scripts/gotest.sh $(RACE) -count=1 -timeout 25m ./...
	$(MAKE) --no-print-directory fuzz

vet:
	$(GO) vet ./...

# Each target runs a count of inputs, about 15 s of it on a 2-core machine:
# a duration (-fuzztime 15s) races Go 1.26's fuzz coordinator at its end,
# which then fails the target with a bare "context deadline exceeded" and no
# input (golang/go#75804, fixed in Go 1.27). FUZZTIME, when set, is used for
# every target instead (a count such as 1000000x, or a duration).
FUZZTIME ?=
fuzz: ## run the fuzz targets for a short, bounded count of inputs
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(or $(FUZZTIME),150000x) ./waitroom
	$(GO) test -run '^$$' -fuzz '^FuzzVerifyOwnAgreesWithTheLibrary$$' -fuzztime $(or $(FUZZTIME),300000x) ./waitroom
	$(GO) test -run '^$$' -fuzz '^FuzzParseWebhook$$' -fuzztime $(or $(FUZZTIME),180000x) ./origin/payment
	$(GO) test -run '^$$' -fuzz '^FuzzWebhookHandler$$' -fuzztime $(or $(FUZZTIME),80000x) ./origin
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(or $(FUZZTIME),600000x) ./origin/ticketcode

# The Redis tests again with REDIS_URL naming a local 3-master Redis Cluster
# (scripts/cluster.sh): the inventory scripts, the gateway's Redis store, the
# origin's tests (sales, rebuilds, the reaper), Caddy gateways and whole
# flash sales through Caddy and the origin (one gateway and three) on the
# cluster. TestRedisDown stops a server of its own, which a cluster URL
# cannot name; nor can the sale's redis-restart fault.
.PHONY: test-cluster test-cluster-go
test-cluster: ## the Redis tests on a local 3-master Redis Cluster (make test runs them on one server)
	scripts/services.sh scripts/cluster.sh $(MAKE) --no-print-directory test-cluster-go

test-cluster-go:
	REDIS_URL="$$REDIS_CLUSTER_URL" GO=$(GO) scripts/gotest.sh $(RACE) -count=1 -timeout 20m ./internal/redisurl/ ./inventory/ ./waitroom/ ./origin/
	REDIS_URL="$$REDIS_CLUSTER_URL" GO=$(GO) scripts/gotest.sh $(RACE) -count=1 -timeout 10m -run 'Redis|TwoGateways' -skip '^TestRedisDown$$' ./caddymodule/
	REDIS_URL="$$REDIS_CLUSTER_URL" GO=$(GO) scripts/gotest.sh $(RACE) -count=1 -timeout 10m -run '^TestFlashSale$$/^(plain|three_gateways)$$' ./loadtest/

bench-go: ## Go benchmarks: queue tokens (issue, verify) and the handler's cost per request
	$(GO) test -run '^$$' -bench . -benchmem ./waitroom ./caddymodule

clean:
	rm -rf $(BIN)

# The browser tests (build tag browser, named TestBrowser…) drive headless
# Chromium through internal/browser; screenshots land in out/browser/.
.PHONY: test-browser
test-browser: ## the pages in headless Chromium (installs chromium when missing); screenshots in out/browser/
	scripts/chromium.sh
	GO=$(GO) scripts/services.sh scripts/gotest.sh -tags browser -count=1 -timeout 10m -run '^TestBrowser' ./internal/browser ./caddymodule ./origin/storefront ./examples

# The Cloudflare Worker (edge/cloudflare/worker, docs/edge.md) in workerd,
# through miniflare: its answers, and the Go code's token and request
# verdicts (edge/cloudflare/testdata/verdicts.json). npm ci installs what
# the lockfile names.
EDGE_WORKER := edge/cloudflare/worker
.PHONY: test-edge
test-edge: $(EDGE_WORKER)/node_modules/.package-lock.json ## the edge Worker in workerd: sold-out 410s, tokens judged as the Go code judges them
	cd $(EDGE_WORKER) && npm test

$(EDGE_WORKER)/node_modules/.package-lock.json: $(EDGE_WORKER)/package-lock.json
	cd $(EDGE_WORKER) && npm ci --no-audit --no-fund

# The whole-sale simulation (sim/, see its doc.go): seeded, replayable runs
# of whole sales of every kind (a seed's kind is the seed modulo 4), steps in
# concurrent groups, against the origin under faults. SEED=… with STEPS=… (a
# count, or count:indices of a shrunk run) or SIMSTEPS=<file> replays one.
SEED ?=
SEEDS ?=
SEED_BASE ?=
STEPS ?=
SIMSTEPS ?=
SIM_PARALLEL ?= 3
.PHONY: sim sim-long
sim: ## the seeded whole-sale simulation under faults (CI's 24 seeds of each kind × 80 steps; SEED=… STEPS=… replays a run)
	scripts/services.sh env SEED='$(SEED)' SEEDS='$(SEEDS)' STEPS='$(STEPS)' SIMSTEPS='$(SIMSTEPS)' \
		$(GO) test -count=1 -timeout 30m -parallel $(SIM_PARALLEL) -run '^TestSim$$' -v ./sim/

sim-long: ## the simulation over 200 more seeds of each kind × 300 steps, every fault on (about an hour on 2 cores; SEED_BASE=… for other seeds)
	scripts/services.sh env SEEDS='$(or $(SEEDS),800)' SEED_BASE='$(or $(SEED_BASE),1000)' STEPS='$(or $(STEPS),300)' SIM_FAULTS=on \
		$(GO) test -count=1 -timeout 180m -parallel 3 -run '^TestSim$$' -v ./sim/

# The model of the admission rules (caddymodule/model_test.go, see
# docs/development.md): random sequences of arrivals, tokens, watermark
# moves, revocations, clock jumps, an opening and Redis losing its state,
# through the real handler with the memory store, Redis and two gateways,
# each answer held to the rules. make test runs a modest count of runs;
# MODEL_CHECKS runs per form here, MODEL_SEED=… replays one.
MODEL_CHECKS ?= 5000
MODEL_STEPS ?= 60
MODEL_SEED ?=
.PHONY: model-long
model-long: ## the admission model over many more runs (MODEL_CHECKS per form, default 5000; MODEL_SEED=… replays one)
	scripts/services.sh $(GO) test -count=1 -timeout 120m -run '^TestAdmissionModel' -v ./caddymodule/ \
		-rapid.checks=$(MODEL_CHECKS) -rapid.steps=$(MODEL_STEPS) $(if $(MODEL_SEED),-rapid.seed=$(MODEL_SEED))

# The load generator (loadtest/): the demo and the benchmarks. Each target
# builds what it runs and starts private Redis and PostgreSQL servers through
# scripts/services.sh (unless REDIS_URL and DATABASE_URL name running ones).
# Pass flags with ARGS, e.g. make demo ARGS='--users 200000 --faults all'.
ARGS ?=
# need-wrk installs wrk (Debian package) when it is missing.
need-wrk = @command -v wrk >/dev/null 2>&1 || { echo "installing wrk (Debian package)" >&2; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk; }

.PHONY: up
up: ## the product on this machine to try in a browser (storefront, console); Ctrl-C stops it
	$(GO) build -o $(BIN)/ ./cmd/caddy ./cmd/origin ./loadtest
	scripts/services.sh $(BIN)/loadtest up $(ARGS)

.PHONY: demo demo-cluster demo-2m bench-strategies bench-gate bench-gateway bench-holds bench-seats bench-confirm bench-admission loadtest-bin

loadtest-bin:
	$(GO) build -o $(BIN)/loadtest ./loadtest

demo: build loadtest-bin ## a whole flash sale through Caddy + waitroom and the origin, with a report
	scripts/services.sh $(BIN)/loadtest flashsale $(ARGS)

demo-cluster: build loadtest-bin ## the demo's flash sale on a local 3-master Redis Cluster (scripts/cluster.sh)
	scripts/services.sh scripts/cluster.sh sh -c 'exec "$$0" flashsale --redis-url "$$REDIS_CLUSTER_URL" "$$@"' $(BIN)/loadtest $(ARGS)

demo-2m: build loadtest-bin ## the seed's sale: two million users over 4 minutes for 500 seats, on this machine
	scripts/services.sh $(BIN)/loadtest flashsale --users 2000000 --window 4m --timeout 9m $(ARGS)

bench-strategies: loadtest-bin ## four ways to sell the last ticket (500 buyers, 100 tickets)
	scripts/services.sh $(BIN)/loadtest strategies $(ARGS)

bench-gate: build loadtest-bin ## peak concurrency at the origin without and with the waiting room
	scripts/services.sh $(BIN)/loadtest gate $(ARGS)

bench-gateway: build loadtest-bin ## gateway throughput ratios, side by side in one Caddy, driven by wrk
	$(need-wrk)
	SERVICES=redis scripts/services.sh $(BIN)/loadtest gateway $(ARGS)

bench-admission: build loadtest-bin ## the same crowd under the fixed-rate autopilot and the closed loop, side by side
	scripts/services.sh $(BIN)/loadtest admission $(ARGS)

bench-holds: build loadtest-bin ## durable holds per second through the origin (driven by wrk) vs the bare hold script, in turn, median of 5 rounds (about 2 min)
	$(need-wrk)
	scripts/services.sh $(BIN)/loadtest holds $(ARGS)

bench-seats: build loadtest-bin ## reserved seating: hot-seat contention, then seat map reads with wrk
	$(need-wrk)
	scripts/services.sh $(BIN)/loadtest seats $(ARGS)

bench-confirm: loadtest-bin ## confirmations per second of one event (50,000 seats, 500 concurrent payers)
	scripts/services.sh $(BIN)/loadtest confirm $(ARGS)

include xcaddy.mk

# The backend recipes (examples/backends): the Go, Node and Python checks of
# the gateway's X-Waitroom-Token against the shared token table
# (edge/cloudflare/testdata/verdicts.json), and of the booking events'
# signature against examples/backends/testdata/signatures.json. Node's jose comes from the
# lockfile, Python's PyJWT from Debian's python3-jwt (installed when missing
# and running as root).
RECIPES := examples/backends
.PHONY: test-recipes
test-recipes: $(RECIPES)/node/node_modules/.package-lock.json ## the backend recipes (Go, Node, Python) against the shared token and signature tables
	$(GO) test -count=1 ./$(RECIPES)/...
	cd $(RECIPES)/node && npm test
	@/usr/bin/python3 -c 'import jwt' 2>/dev/null || { \
		if [ "$$(id -u)" != 0 ]; then echo "test-recipes: install python3-jwt (Debian)" >&2; exit 1; fi; \
		echo "installing python3-jwt (Debian package)" >&2; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-jwt; }
	cd $(RECIPES)/python && /usr/bin/python3 -m unittest -v

$(RECIPES)/node/node_modules/.package-lock.json: $(RECIPES)/node/package-lock.json
	cd $(RECIPES)/node && npm ci --no-audit --no-fund
