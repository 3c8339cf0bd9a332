# linemq: the two commands are `make run` and `make test`.
GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
DATA_DIR ?= ./data
FUZZTIME ?= 60s

.PHONY: run build test vet fuzz bench bench-compare cross clean

## run: build and start a standalone broker on :1883 with its data in ./data
run: build
	mkdir -p $(DATA_DIR)
	./$(BIN)/linemq -mqtt-listen :1883 -http-listen :8080 -data-dir $(DATA_DIR)

## build: the daemon and the bench tool for this machine
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

## test: vet, then every test (fuzz seed corpora included) with the race detector
test: vet
	$(GO) test -race -count=1 -timeout 12m ./...

vet:
	$(GO) vet ./...

## fuzz: run every fuzz target for FUZZTIME each, one after the other
fuzz:
	@for pkg in ./broker/packet ./broker/topic ./broker/share; do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## bench: the codec, topic and share benchmarks
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./broker/...

## cross: the ARM builds the appliance ships
cross:
	GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-arm64/ ./cmd/...
	GOOS=linux GOARCH=arm GOARM=7 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-armv7/ ./cmd/...

clean:
	rm -rf $(BIN)

## bench-compare: linemq and Debian's Mosquitto side by side; writes docs/benchmarks.md
bench-compare: build
	$(GO) run ./cmd/linemq-compare -linemq $(BIN)/linemq -reps 3 -duration 5s -out docs/benchmarks.md
