# Waitroom — build, test and demo targets. `make help` lists them.
GO ?= go
BIN := bin

.PHONY: help build test test-go vet fuzz clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

build: ## build Caddy with the waitroom module (bin/caddy)
	$(GO) build -o $(BIN)/caddy ./cmd/caddy

test: ## run every test against private Redis and PostgreSQL servers
	scripts/services.sh $(MAKE) --no-print-directory test-go

test-go: vet ## run the tests against REDIS_URL and DATABASE_URL
	$(GO) test -count=1 -timeout 15m ./...
	$(MAKE) --no-print-directory fuzz

vet:
	$(GO) vet ./...

FUZZTIME ?= 15s
fuzz: ## run the fuzz targets for a short, bounded time
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./waitroom

clean:
	rm -rf $(BIN)
