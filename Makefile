# linemq: the two commands are `make run` and `make test`.
GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
DATA_DIR ?= ./data
FUZZTIME ?= 60s

.PHONY: run build test vet tahu-deps fuzz bench bench-compare cross clean test-arm systemd-check dist dist-check sdimage-smoke appliance-test systemd-test powercut-test chaos bundle update-test
.PHONY: needs-bench-compare needs-test-arm needs-sdimage-smoke needs-appliance-test needs-systemd-test needs-powercut-test

# Targets that run programs from outside Go check for them before they
# build anything, and name the Debian package of each one missing
# (scripts/appliance/needs.sh): a missing genimage should cost a second,
# not a cross build and half a run. The script of a target knows what it
# calls, so the list is kept there (SCRIPT --needs only checks); the
# targets without a script keep theirs here.
NEEDS := scripts/appliance/needs.sh
needs-sdimage-smoke needs-appliance-test needs-systemd-test needs-powercut-test: needs-%:
	@scripts/appliance/$*.sh --needs

## run: build and start a standalone broker on :1883 (MQTT) and :8080 (HTTP)
## with its data in ./data. MQTT=ADDR and HTTP=ADDR listen elsewhere, so a
## second broker (or one beside Mosquitto) fits on the same machine:
##   make run MQTT=127.0.0.1:1884 HTTP=127.0.0.1:8081 DATA_DIR=./data2
## CONFIG=FILE starts it with that configuration file (its listeners)
## instead; MQTT= and HTTP= given with it override the file's mqtt.listen and
## http.listen, as the flags do.
MQTT ?=
HTTP ?=
run: build
	mkdir -p $(DATA_DIR)
	./$(BIN)/linemq $(if $(CONFIG),-config $(CONFIG) $(if $(MQTT),-mqtt-listen $(MQTT)) $(if $(HTTP),-http-listen $(HTTP)),-mqtt-listen $(or $(MQTT),:1883) -http-listen $(or $(HTTP),:8080)) -data-dir $(DATA_DIR)

## build: the daemon and the bench tool for this machine
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

## test: vet, then every test (fuzz seed corpora included) with the race
## detector, then the cluster fault suite's fixed set on its own (its bounds
## are timings: alone, it measures the line, not a machine also running
## every other package's tests)
test: vet tahu-deps
	$(GO) test -race -count=1 -timeout 12m ./...
	$(GO) test -race -count=1 -timeout 5m -tags browser -run 'InBrowser|WithBrowser' ./gateway/web
	LINEMQ_FAULT_SUITE=1 $(GO) test -race -count=1 -timeout 10m -run 'TestFaultSuite|TestOrdinarySubscribersCutOff|TestCutOffMemberRejoins|TestSparkplugLine' -v ./internal/chaos

## tahu-deps: the independent Sparkplug edge node the tests run (Eclipse
## Tahu's sparkplug-client, gateway/sparkplug/testdata/tahu), installed from
## its lock file when npm is here and the lock file is newer than what is
## installed; without npm the Tahu test skips, saying so
TAHU := gateway/sparkplug/testdata/tahu
tahu-deps:
	@if command -v npm >/dev/null 2>&1; then \
	  if [ ! -f $(TAHU)/node_modules/.package-lock.json ] || [ $(TAHU)/package-lock.json -nt $(TAHU)/node_modules/.package-lock.json ]; then \
	    npm ci --prefix $(TAHU) --no-audit --no-fund --loglevel=error; fi; \
	else echo "tahu-deps: npm not found: the Tahu edge node test will skip"; fi

## vet: go vet (the browser tests' files too, behind their build tag), and go.mod and go.sum as go mod tidy leaves them (a direct
## dependency marked indirect, or one nothing imports, fails here rather
## than in someone else's go mod tidy)
vet:
	$(GO) vet ./...
	$(GO) vet -tags browser ./gateway/web
	@out=$$($(GO) mod tidy -diff 2>&1) || { printf '%s\n' "$$out"; \
	  echo "vet: go.mod or go.sum differ from what 'go mod tidy' makes (above): run go mod tidy and commit both"; exit 1; }

## fuzz: run every fuzz target for FUZZTIME each, one after the other
fuzz:
	@for pkg in ./broker ./broker/packet ./broker/topic ./broker/share ./gateway/cluster ./gateway/config ./gateway/peer ./gateway/sparkplug ./gateway/update ./storage/bolt; do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## chaos: the cluster fault suite (cmd/linemq-chaos, internal/chaos): RUNS
## runs with seeds SEED, SEED+1, ...; each is three linemq processes (an
## etcd member in each) under QoS 1 load and a schedule of faults drawn from
## CHAOS_FAULTS by the seed, CHAOS_DURATION long: kill, stop, leader, move,
## partition (root and ip netns only, skipped otherwise), line, wipe (a node
## killed with its data directory deleted, then a blank replacement). Prints each
## seed's schedule, figures and invariants; fails if any run violated one.
## Reproduce a failing seed with make chaos SEED=N RUNS=1. make test runs a
## fixed set of three seeds (internal/chaos TestFaultSuite), a node cut off
## for 20 s (TestOrdinarySubscribersCutOff) and one cut off for 15 s whose
## etcd member must rejoin within 3 s of the heal (TestCutOffMemberRejoins).
SEED           ?= 1
RUNS           ?= 20
CHAOS_DURATION ?= 40s
CHAOS_FAULTS   ?= all
chaos:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/linemq ./cmd/linemq-chaos
	./$(BIN)/linemq-chaos -linemq $(BIN)/linemq -seed $(SEED) -runs $(RUNS) -duration $(CHAOS_DURATION) -faults $(CHAOS_FAULTS)

## bench: the codec, topic and share benchmarks
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./broker/...

## cross: the ARM builds the appliance ships: static (no cgo), -trimpath,
## version stamped; bin/linux-arm64, bin/linux-armv7, bin/linux-armv6
CROSS_CMDS ?= ./cmd/linemq
cross:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-arm64/ $(CROSS_CMDS)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-armv7/ $(CROSS_CMDS)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-armv6/ $(CROSS_CMDS)
	@for a in arm64 armv7 armv6; do \
	  $(GO) version -m $(BIN)/linux-$$a/linemq | grep -q 'CGO_ENABLED=0' || { echo "cross: $$a: not a static (CGO_ENABLED=0) build"; exit 1; }; \
	  printf '%-24s %s\n' "$(BIN)/linux-$$a/linemq" "$$(ls -l $(BIN)/linux-$$a/linemq | awk '{print $$5}') bytes"; \
	done

clean:
	rm -rf $(BIN)

## bench-compare: linemq and Debian's Mosquitto side by side, then a
## three-node linemq cluster (an etcd member in each) next to one linemq
## under the same QoS 1 fan-in; writes docs/benchmarks.md. Only the cluster
## part (no Mosquitto needed): go run ./cmd/linemq-compare -only cluster
needs-bench-compare:
	@$(NEEDS) bench-compare mosquitto:mosquitto
bench-compare: needs-bench-compare build
	$(GO) run ./cmd/linemq-compare -linemq $(BIN)/linemq -reps 3 -duration 5s -out docs/benchmarks.md

## test-arm: the broker and storage tests cross-compiled for arm64 and
## 32-bit ARM (GOARMv7) and run under qemu-user (Debian's qemu-user-static),
## which catches 32-bit alignment and atomics mistakes. No -race (not there
## on emulated ARM). -short skips what cannot run under qemu-user or is
## timing-bound there:
##   storage/bolt TestKillDuringWrites re-executes the test binary, which
##     needs binfmt_misc for ARM (not registered in CI containers);
##   broker soak/flood tests are long load runs, far too slow emulated.
ARM_TEST_PKGS    ?= ./broker/... ./storage/...
ARM_TEST_TIMEOUT ?= 20m
ARM_TEST_FLAGS   ?= -short -count=1
ARM_TEST_SKIP    ?=
needs-test-arm:
	@$(NEEDS) test-arm qemu-aarch64-static:qemu-user-static qemu-arm-static:qemu-user-static
test-arm: needs-test-arm
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) test $(ARM_TEST_FLAGS) -timeout $(ARM_TEST_TIMEOUT) \
	  $(if $(ARM_TEST_SKIP),-skip '$(ARM_TEST_SKIP)') -exec qemu-aarch64-static $(ARM_TEST_PKGS)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) test $(ARM_TEST_FLAGS) -timeout $(ARM_TEST_TIMEOUT) \
	  $(if $(ARM_TEST_SKIP),-skip '$(ARM_TEST_SKIP)') -exec qemu-arm-static $(ARM_TEST_PKGS)

## systemd-check: the units staged into a temporary root: systemd-analyze
## verify (any output fails), sysusers/tmpfiles, and systemd-analyze security
## with the exposure level at most SYSTEMD_EXPOSURE tenths (15 = 1.5, "OK")
SYSTEMD_EXPOSURE ?= 15
systemd-check:
	scripts/appliance/systemd-check.sh $(SYSTEMD_EXPOSURE)

## dist: bin/dist/linemq-VERSION.tar.gz, the committed tree with its Go modules
## vendored (made in a temporary copy), the source the Buildroot package
## builds offline; dist-check also builds linemq from it with GOPROXY=off
DIST         ?= $(BIN)/dist
DIST_VERSION ?= $(shell git describe --tags --always 2>/dev/null || echo dev)
dist:
	scripts/appliance/dist.sh $(DIST_VERSION) $(DIST)

dist-check:
	scripts/appliance/dist.sh $(DIST_VERSION) $(DIST) check

## sdimage-smoke: the appliance's SD card image assembled with Debian's
## genimage from the arm64 build, the overlay and the units (no kernel),
## then its partitions opened with mtools and debugfs to check the layout,
## the files and their modes; for each of SDIMAGE_BOARDS: rpi4_64 is the
## A/B card of the tryboot boards, with its RAUC bundle checked by
## Debian's rauc; rpi3_64 the single-root card
SDIMAGE_BOARDS ?= rpi4_64 rpi3_64
sdimage-smoke: needs-sdimage-smoke cross
	@for b in $(SDIMAGE_BOARDS); do \
	  scripts/appliance/sdimage-smoke.sh $(BIN)/linux-arm64/linemq $$b || exit 1; \
	done

## appliance-test: the arm64 build booted under qemu-system-aarch64 -M virt
## (Debian's arm64 kernel, cached; busybox initramfs): /readyz, status page,
## MQTT round trip and a shared group through hostfwd ports, then softdog
## resets for a hung broker and for a failing health check
appliance-test: needs-appliance-test cross
	scripts/appliance/appliance-test.sh $(BIN)/linux-arm64/linemq

## bundle: a signed update bundle of the ARM build, bin/linemq-VERSION-ARCH.bundle
## (docs/updates.md). BUNDLE_KEY=FILE is the signing key (make one with
## bin/linemq update keygen NAME); BUNDLE_ARCH=arm64 (default), armv7 or armv6
BUNDLE_ARCH ?= arm64
bundle: build cross
	@[ -n "$(BUNDLE_KEY)" ] || { echo "bundle: give the signing key: make bundle BUNDLE_KEY=FILE (bin/linemq update keygen NAME makes one)"; exit 2; }
	$(BIN)/linemq update bundle -key $(BUNDLE_KEY) -version $(VERSION) -o $(BIN)/linemq-$(VERSION)-$(BUNDLE_ARCH).bundle $(BIN)/linux-$(BUNDLE_ARCH)/linemq

## systemd-test: the appliance's own root file system booted with systemd
## as PID 1 under qemu-system-aarch64 -M virt (assembled from Debian's
## arm64 packages in the Buildroot image's layout; read-only root, boot and
## data disks): a provisioning set applied by linemq-config.service, with
## networkd, timesyncd and dropbear running on its files; linemq.service
## READY=1 under its hardening; a SIGSTOPped linemq restarted by
## WatchdogSec=; a frozen PID 1 reset by softdog (RuntimeWatchdogSec=).
## The update cases on the same appliance are make update-test's.
systemd-test: needs-systemd-test cross
	scripts/appliance/systemd-test.sh --base $(BIN)/linux-arm64/linemq

## update-test: first the appliance of systemd-test booted again for its
## updates: bundles committed after their trial (over SSH, and uploaded
## over HTTP in place), rolled back by themselves (exit at start, a hang,
## a failing health check, a power cut during the trial), refused (another
## key) and cut off while written. Then a line of three gateways (real
## processes, embedded etcd) upgraded one gateway at a time under QoS 1
## load, from the previous commit's build (UPDATE_FROM=REV for another) to
## this tree's: one bundle uploaded to all three, the line's update lock in
## etcd, 0 acknowledged messages lost, at most one gateway away at a time
## (docs/updates.md)
update-test: needs-systemd-test cross
	scripts/appliance/systemd-test.sh --updates $(BIN)/linux-arm64/linemq
	scripts/update-test.sh

## powercut-test: power cuts under emulation: the arm64 build under
## qemu-system-aarch64 with its data partition on a virtio disk (an ext4
## image made with mkfs.ext4 -d); QEMU is SIGKILLed while QoS 1 publishers
## send to persistent subscribers, 3 times for storage.sync always and
## batch; every acknowledged message must be delivered after the cuts and
## linemq db check must find the file healthy after each
powercut-test: needs-powercut-test cross
	scripts/appliance/powercut-test.sh $(BIN)/linux-arm64/linemq
