# ferry: two commands for a fresh Debian/Ubuntu machine, `make demo` and
# `make test`. Both install what they need: OpenBLAS only where ferry's own
# GEMM is not the default (no AVX2: arm64, old x86-64) or FERRY_GEMM=openblas
# asks for it (scripts/ensure-openblas.sh).

GO      ?= go
BIN     := bin/ferry
CACHE   := .cache
export CGO_ENABLED := 0

.PHONY: all build test demo deps vet bench clean

all: build

deps:
	@./scripts/ensure-go.sh
	@./scripts/ensure-openblas.sh
	@./scripts/ensure-nats-server.sh

build:
	$(GO) build -o $(BIN) ./cmd/ferry

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

test: deps vet
	$(GO) test -count=1 ./...

demo: deps build
	@./scripts/demo.sh

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 3x ./pipeline/...

clean:
	rm -rf bin $(CACHE)
