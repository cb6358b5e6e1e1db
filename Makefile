# tamanic build and test entry points. `make test` is what CI runs.
GO        ?= go
PKGS      := ./...
COVERPKG  := ./dma/...,./bounce/...,./fec/...,./internal/...,./tso/...,./netstack/...
FUZZTIME  ?= 30s
BENCHTIME ?= 1s

.PHONY: test fmt vet unit race cover cross fuzz bench bench-host clean

## test: everything CI checks (format, vet, race tests, coverage gate, ARM build)
test: fmt vet race cover cross

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

unit:
	$(GO) test $(PKGS)

race:
	$(GO) test -race -count=1 $(PKGS)

## cover: statement coverage of each package across all tests; fec, dma, bounce, tso, netstack must reach 80%
cover:
	@mkdir -p build
	$(GO) test -count=1 -coverpkg=$(COVERPKG) -coverprofile=build/cover.out $(PKGS) > /dev/null
	python3 scripts/coverage.py build/cover.out 80 fec dma bounce tso netstack

## cross: the ARMv7 assembly and every hardware-independent package build and vet for 32-bit ARM
cross:
	GOOS=linux GOARCH=arm GOARM=7 $(GO) vet ./dma/... ./bounce/... ./fec/... ./internal/... ./tso/... ./netstack/...

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@for t in $$(grep -rl '^func Fuzz' --include='*_test.go' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$t/*_test.go | sed 's/func //'); do \
	    echo "== $$t $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$t || exit 1; \
	  done; \
	done

## bench: the README's figures
bench: bench-host

bench-host:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./bounce/ ./fec/ ./tso/ ./internal/pkt/
	$(GO) test -run '^$$' -bench . -benchtime 4x ./netstack/

clean:
	rm -rf build
