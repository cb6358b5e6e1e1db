# tamanic build and test entry points. `make test` is what CI runs.
GO        ?= go
PKGS      := ./...
COVERPKG  := ./dma/...,./bounce/...,./fec/...,./internal/...,./tso/...,./netstack/...,./pcie/...,./e1000e/...,./connectx/...,./tee/...
FUZZTIME  ?= 30s

.PHONY: test baseline-test fmt lines vet unit race race-cover cover cross fuzz bench bench-host bench-qemu bench-cache bench-pps bench-tee bench-targets firmware qemu cosim soak campaign clean cost-gvisor

BOARD     ?= mx6ullevk
,         := ,
TAMAGO    = $$($(GO) tool -n tamago)
TAMAGOENV = GOOS=tamago GOOSPKG=github.com/usbarmory/tamago GOARCH=arm GOARM=7
TAMAGODIR = $$($(GO) list -m -f '{{.Dir}}' github.com/usbarmory/tamago)
# Per board: the text address (DDR start + 64 KiB; the i.MX6Q's DDR is at
# 0x10000000) and the DCD: board/$(BOARD)/imximage.cfg when the board has
# its own (sabrelite, mcimx7d: TamaGo ships none), TamaGo's otherwise.
LINKADDR  = $(if $(filter sabrelite,$(BOARD)),0x10010000,0x80010000)
DCD       = $(or $(wildcard board/$(BOARD)/imximage.cfg),$(TAMAGODIR)/board/$(if $(filter usbarmory,$(BOARD)),usbarmory/mk2,nxp/$(BOARD))/imximage.cfg)

## test: everything CI checks (format, file lengths, vet, race tests, coverage gate, ARM build)
test: fmt lines vet race-cover cross baseline-test gvisor-test

## lines: no Go file over 600 lines, no test over 800 (issue 31; split along the code's seams)
lines:
	@scripts/linecount.sh

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

## baseline-test: the baseline firmware's module (baseline/, TamaGo's own ENET driver with go-net) is vetted and its glue tested
baseline-test:
	cd baseline && $(GO) vet ./... && $(GO) test -race -count=1 ./...

unit:
	$(GO) test $(PKGS)

## gvisor-test: the endpoint's tests and every board's QEMU end-to-end run again with gVisor patched
## (docs/gvisor-patches/, the build make firmware GVISOR=patched makes); the QEMU part skips as the others do
GVISORWORK := $(CURDIR)/build/gvisor-patched.work
gvisor-test:
	scripts/gvisor-patched.sh --prepare
	GOMEMLIMIT=$(TESTMEMLIMIT) GOWORK=$(GVISORWORK) $(GO) test -count=1 ./netstack/...
	GOWORK=$(GVISORWORK) $(GO) test -count=1 -run 'TestFirmwareEndToEnd$$' ./qemu/

race:
	$(GO) test -race -p 1 -count=1 $(PKGS)

## race-cover: what make test runs: every package's tests once, under the race detector, with the
## coverage gate of cover on the same run (one pass instead of race's and cover's two; the full-size
## transfers the race detector shortens run without it in gvisor-test and make soak)
## TESTMEMLIMIT is the Go heap's soft limit in race-cover's test binaries (GOMEMLIMIT): without it the
## netstack tests' heap grew to a 9.6 GB process under the race detector, whose shadow memory follows the
## heap's span; with it the peak is what docs/testing.md states. The 20 m timeout is for loaded machines.
TESTMEMLIMIT ?= 1GiB
race-cover:
	@mkdir -p build
	GOMEMLIMIT=$(TESTMEMLIMIT) $(GO) test -race -p 1 -count=1 -timeout 20m -coverpkg=$(COVERPKG) -coverprofile=build/cover.out $(PKGS) > build/cover-test.log 2>&1 \
	  || { grep -v '^ok\|no test files' build/cover-test.log | tail -80; exit 1; }
	@grep -E '^(ok|---|FAIL)' build/cover-test.log | sed 's/	coverage:.*//'
	python3 scripts/coverage.py build/cover.out 80 fec dma bounce tso netstack pcie e1000e connectx tee

## cover: statement coverage of each package across all tests; fec, dma, bounce, tso, netstack, pcie, e1000e, connectx, tee must reach 80%
cover:
	@mkdir -p build
	$(GO) test -p 1 -count=1 -coverpkg=$(COVERPKG) -coverprofile=build/cover.out $(PKGS) > build/cover-test.log 2>&1 \
	  || { grep -v '^ok\|no test files' build/cover-test.log | tail -80; exit 1; }
	python3 scripts/coverage.py build/cover.out 80 fec dma bounce tso netstack pcie e1000e connectx tee

## cross: the ARMv7 assembly and every hardware-independent package build and vet for 32-bit ARM;
## the packages without privileged instructions (checksum assembly included) also run under qemu-arm
cross:
	GOOS=linux GOARCH=arm GOARM=7 $(GO) vet ./dma/... ./bounce/... ./fec/... ./internal/... ./tso/... ./netstack/... ./pcie/... ./e1000e/... ./connectx/... ./tee/...
	@if command -v qemu-arm >/dev/null 2>&1; then \
	  echo "GOARCH=arm go test -exec qemu-arm ./internal/... ./bounce/... ./tso/... ./pcie/..."; \
	  GOOS=linux GOARCH=arm GOARM=7 $(GO) test -count=1 -exec qemu-arm ./internal/... ./bounce/... ./tso/... ./pcie/...; \
	else echo "cross: SKIP ARM test run: qemu-arm (Debian package qemu-user) not installed"; fi

## cost-gvisor: instructions per MiB (QEMU icount) with the gVisor changes in docs/gvisor-patches/ applied
## to a copy of the gVisor module (build/gvisor-patched, via a go.work); not part of make test
cost-gvisor:
	scripts/gvisor-patched.sh -warm -runs 3 -cfg tx:bounce:512,tx:sg:512,rx:tso:512 -o build/cost-gvisor

## firmware: build/tamanic-$(BOARD).elf (QEMU, JTAG), .bin and the bootable .imx (needs the TamaGo compiler and mkimage).
## CONTROL_TOKEN=secret opens POST /mode to "Authorization: Bearer secret"; without it the control port is closed.
## The address comes by DHCP unless IP is set: IP=10.0.0.1/24 GATEWAY=10.0.0.2 builds a static image;
## DHCP=on with IP set takes DHCP and falls back to IP after 30 s without a lease.
CONTROL_TOKEN ?=
IP            ?=
GATEWAY       ?=
DHCP          ?=
## SELFTEST=off skips the loopback self-tests at boot (the ENET's, and the i.MX7D's 82574L's; on by default).
SELFTEST      ?=
## GRO=off and ACKFILTER=off build the ENET's endpoint without GRO or the ACK filter (both on by default;
## the console says RXMERGE when one is off): the request/response rows that measure what each does.
GRO           ?=
ACKFILTER     ?=
APPPKG        := github.com/tamanic/tamanic/firmware/app
FWLDFLAGS      = -T $(LINKADDR) -R 0x1000 $(if $(CONTROL_TOKEN),-X $(APPPKG).BuildControlToken=$(CONTROL_TOKEN)) \
  $(if $(SELFTEST),-X github.com/tamanic/tamanic/firmware/internal/fwmain.SelfTest=$(SELFTEST)) \
  $(if $(GRO),-X github.com/tamanic/tamanic/firmware/internal/fwmain.GRO=$(GRO)) \
  $(if $(ACKFILTER),-X github.com/tamanic/tamanic/firmware/internal/fwmain.AckFilter=$(ACKFILTER)) \
  $(if $(IP),-X $(APPPKG).BuildIP=$(IP)) $(if $(GATEWAY),-X $(APPPKG).BuildGateway=$(GATEWAY)) $(if $(DHCP),-X $(APPPKG).BuildDHCP=$(DHCP))$(if $(CX_IP), -X main.CXIP=$(CX_IP))
## TEE=1 (BOARD=mx6ullevk only) builds the TrustZone-partitioned image instead: the Normal World OS
## (firmware/mx6ullevk-tee/normal, HOSTILE=1 adds the hostile-call mode) embedded in the Trusted OS
## (firmware/mx6ullevk-tee): build/tamanic-mx6ullevk-tee.elf, .bin and .imx (its DCD disables TZASC bypass).
## TEE_DEBUG=1 keeps JTAG on (development); without it the Trusted OS turns debug off and locks it.
TEE     ?=
HOSTILE ?=
TEE_DEBUG ?=
## GVISOR=patched links gVisor with docs/gvisor-patches/ applied (the measured cost step; not upstream, so not the default).
GVISOR ?=
FWENV   = $(if $(filter patched,$(GVISOR)),GOWORK=$(GVISORWORK))
firmware:
	@case "$(GVISOR)" in ""|stock|patched) ;; *) echo "firmware: GVISOR=$(GVISOR): want stock or patched"; exit 1;; esac
	@if [ "$(GVISOR)" = patched ]; then scripts/gvisor-patched.sh --prepare; fi
	@case "$(DHCP)" in ""|on|off) ;; *) echo "firmware: DHCP=$(DHCP): want on or off"; exit 1;; esac
	@if [ "$(DHCP)" = off ] && [ -z "$(IP)" ]; then echo "firmware: DHCP=off needs IP=a.b.c.d/n"; exit 1; fi
	@mkdir -p build
ifeq ($(TEE),1)
	@if [ "$(BOARD)" != mx6ullevk ]; then echo "firmware: TEE=1 is for BOARD=mx6ullevk"; exit 1; fi
	$(FWENV) $(TAMAGOENV) $(TAMAGO) build -tags linkramsize,tamanic_tee -ldflags "$(FWLDFLAGS) $(if $(HOSTILE),-X main.Hostile=1)" \
	  -o build/tamanic-mx6ullevk-tee-normal.elf ./firmware/mx6ullevk-tee/normal
	cp build/tamanic-mx6ullevk-tee-normal.elf firmware/mx6ullevk-tee/assets/normal.elf
	$(FWENV) $(TAMAGOENV) $(TAMAGO) build -tags linkramsize,linkramstart,linkcpuinit,tamanic_tee -ldflags "-T 0x90010000 -R 0x1000 $(if $(TEE_DEBUG),-X main.Debug=1)" \
	  -o build/tamanic-mx6ullevk-tee.elf ./firmware/mx6ullevk-tee
	@dcd=$(DCD); if [ -f $$dcd ]; then \
	  { cat $$dcd; echo "DATA 4 0x020e4024 0x00000001 # IOMUXC_GPR_GPR9 TZASC1_BYP: TZASC on before DDR init"; } > build/tamanic-mx6ullevk-tee.dcd; \
	  $(GO) run ./qemu/cmd/tamanic-image -dcd build/tamanic-mx6ullevk-tee.dcd -o build/tamanic-mx6ullevk-tee build/tamanic-mx6ullevk-tee.elf; \
	else $(GO) run ./qemu/cmd/tamanic-image -o build/tamanic-mx6ullevk-tee build/tamanic-mx6ullevk-tee.elf; fi
else
	$(FWENV) $(TAMAGOENV) $(TAMAGO) build -tags linkramsize,linkcpuinit -ldflags "$(FWLDFLAGS)" -o build/tamanic-$(BOARD).elf ./firmware/$(BOARD)
	@dcd=$(DCD); if [ -f $$dcd ]; then \
	  $(GO) run ./qemu/cmd/tamanic-image -dcd $$dcd -o build/tamanic-$(BOARD) build/tamanic-$(BOARD).elf; \
	else echo "firmware: no DCD for $(BOARD) (board/$(BOARD)/imximage.cfg or TamaGo's): .bin only, no .imx"; \
	  $(GO) run ./qemu/cmd/tamanic-image -o build/tamanic-$(BOARD) build/tamanic-$(BOARD).elf; fi
endif

## qemu: build the firmware and boot it interactively under QEMU (Ctrl-C stops it)
qemu:
	$(GO) run ./qemu/cmd/tamanic-qemu -board $(BOARD) $(if $(filter mcimx7d,$(BOARD)),-e1000e)

## cosim: the i.MX7D firmware under QEMU driving the ConnectX model in a tamanic-cxsim process (BAR0 an
## ivshmem BAR, guest RAM shared as a file); prints the model's wire address (CXPORT, default 7700) and how
## to attach a peer; Ctrl-C stops both
cosim:
	$(MAKE) firmware BOARD=mcimx7d
	$(GO) build -o build/tamanic-cxsim ./qemu/cmd/tamanic-cxsim
	sh scripts/cosim.sh build/tamanic-mcimx7d.elf build/tamanic-cxsim

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@for t in $$(grep -rl '^func Fuzz' --include='*_test.go' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$t/*_test.go | sed 's/func //'); do \
	    echo "== $$t $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$t || exit 1; \
	  done; \
	done

## bench: the figures in README.md and docs/figures.md: host benchmarks summarised with benchstat, then the QEMU comparison
## (bounce vs sg vs TSO, copybreak on/off, a PC-sampled profile; request/response, TCP_RR and UDP_RR: -rr, on the
## mx6ullevk with the baseline, GRO/ACK filter off and a copybreak sweep, about 2 min, on the i.MX7D its ENET1 and
## its 82574L), the cache model and the small datagrams, all in build/bench/report.md; the TrustZone comparison
## and issue 16's targets have their own targets (bench-tee, bench-targets)
BENCHSIZE  ?= 33554432
## the transfers of issue 16's cost targets, measured on stock and patched gVisor (tamanic-cost -cfg)
COSTCFG    ?= tx:bounce:512,tx:sg:512,tx:tso:512,rx:tso:512
BENCHCOUNT ?= 6
# make bench runs every board (build/bench-BOARD/, the mx6ullevk in
# build/bench/) and puts them side by side in build/bench/boards.md;
# make bench BOARD=x runs one.
ALLBOARDS   := mx6ullevk mcimx7d sabrelite usbarmory
BENCHBOARDS ?= $(if $(filter command line environment,$(origin BOARD)),$(BOARD),$(ALLBOARDS))
bench: bench-host bench-qemu bench-cache bench-pps
# REPORTDIR is the run's report: build/bench with the mx6ullevk, else the
# first board's (make bench BOARD=mcimx7d appends to build/bench-mcimx7d/
# report.md, never to an older run's build/bench/report.md)
REPORTDIR = build/bench$(if $(filter mx6ullevk,$(BENCHBOARDS)),,-$(firstword $(BENCHBOARDS)))

## bench-cache: the silicon cost estimate with caches (issue 30): tamanic-cost -cache on the boards with a
## cache model: on the i.MX6ULL and i.MX6Q every TX mode and the receive path, on the i.MX6ULL also TamaGo's
## own driver (the baseline firmware, -baseline), on the i.MX7D the 82574L (e1000e-sg, e1000e-tso) and, in a
## boot of their own, the co-simulated ConnectX (cx-sg, cx-tso);
## tabulated with the sensitivity tables into build/bench/cache.md, plotted in build/bench/cache.png and
## appended to the report (about 4.5 min in all)
CACHEBOARDS = $(filter mx6ullevk sabrelite mcimx7d,$(BENCHBOARDS))
CACHECFG   ?= tx:bounce:512,tx:sg:512,tx:tso:512,rx:bounce:512,rx:sg:512,rx:tso:512
CACHECFG_mcimx7d ?= tx:e1000e-sg:0,tx:e1000e-tso:0,rx:e1000e-tso:0
CACHECFG_cx ?= tx:cx-sg:0,tx:cx-tso:0,rx:cx-tso:0
CACHEBASECFG = tx:tamago:0,rx:tamago:0
CACHERUNS  ?= 1
CACHEARGS   = -cache -warm -size 8388608 -runs $(CACHERUNS)
bench-cache:
	@mkdir -p $(REPORTDIR)
	@for b in $(CACHEBOARDS); do \
	  cfg=$(CACHECFG); [ $$b = mcimx7d ] && cfg=$(CACHECFG_mcimx7d); \
	  $(GO) run ./qemu/cmd/tamanic-cost -board $$b $(CACHEARGS) -cfg $$cfg -json $(REPORTDIR)/cache-$$b.json > $(REPORTDIR)/cache-$$b.txt || exit 1; \
	  if [ $$b = mx6ullevk ]; then \
	    $(GO) run ./qemu/cmd/tamanic-cost -board $$b -baseline $(CACHEARGS) -cfg $(CACHEBASECFG) -json $(REPORTDIR)/cache-$$b-baseline.json > $(REPORTDIR)/cache-$$b-baseline.txt || exit 1; \
	  fi; \
	  if [ $$b = mcimx7d ]; then \
	    $(GO) run ./qemu/cmd/tamanic-cost -board $$b $(CACHEARGS) -cfg $(CACHECFG_cx) -json $(REPORTDIR)/cache-$$b-cx.json > $(REPORTDIR)/cache-$$b-cx.txt || exit 1; \
	  fi; \
	done
	@if [ -n "$(CACHEBOARDS)" ]; then $(GO) run ./qemu/cmd/tamanic-bench -cache-report $(REPORTDIR)/cache.md \
	  -cache-command "go run ./qemu/cmd/tamanic-cost -board BOARD $(CACHEARGS) -cfg CFG -json FILE, CFG $(CACHECFG) (mcimx7d: $(CACHECFG_mcimx7d), then in a co-simulated boot $(CACHECFG_cx)); the baseline: -board mx6ullevk -baseline -cfg $(CACHEBASECFG)" \
	  $(foreach b,$(CACHEBOARDS),$(REPORTDIR)/cache-$(b).json $(if $(filter mx6ullevk,$(b)),$(REPORTDIR)/cache-$(b)-baseline.json) $(if $(filter mcimx7d,$(b)),$(REPORTDIR)/cache-$(b)-cx.json)); fi

## bench-pps: small UDP datagrams (issue 33 items 1 and 3) through a socket netdev to a raw-frame peer (tamanic-pps):
## packets per second without loss (plain boot) and guest instructions per packet (icount). On the mx6ullevk
## tamanic in every TX mode and copybreak 512/off, the baseline, then the copybreak sweep (icount only,
## PPSCBCFG); on the i.MX7D its ENET1 and its 82574L (PPSFLAGS_mcimx7d: fewer sizes and modes). Into
## build/bench/pps*.md, the plot pps.png, appended to the report (about 6 min for both boards)
PPSFLAGS ?= -runs 1 -icount-runs 1 -trial 100ms -bisect 2
PPSCBCFG ?= rx:tso:128,rx:tso:256,rx:tso:1024
PPSFLAGS_mcimx7d ?= -sizes 18,256,1472 -cfg rx:tso:512,tx:tso:512 -e1000e-cfg rx:tso,tx:tso
PPSBOARDS = $(filter mx6ullevk mcimx7d,$(BENCHBOARDS))
bench-pps:
	@mkdir -p $(REPORTDIR)
	@for b in $(PPSBOARDS); do \
	  if [ $$b = mx6ullevk ]; then \
	    $(GO) run ./qemu/cmd/tamanic-pps $(PPSFLAGS) -o $(REPORTDIR) || exit 1; \
	    $(GO) run ./qemu/cmd/tamanic-pps $(PPSFLAGS) -plain=false -baseline=false -cfg $(PPSCBCFG) -name pps-copybreak -o $(REPORTDIR) || exit 1; \
	  else \
	    $(GO) run ./qemu/cmd/tamanic-pps $(PPSFLAGS) -board $$b $(PPSFLAGS_mcimx7d) -o $(REPORTDIR) || exit 1; \
	  fi; \
	done
	@if [ -n "$(PPSBOARDS)" ]; then $(GO) run ./qemu/cmd/tamanic-pps -plot $(REPORTDIR)/pps.png \
	  $(if $(filter mx6ullevk,$(PPSBOARDS)),$(REPORTDIR)/pps.json $(REPORTDIR)/pps-copybreak.json) $(if $(filter mcimx7d,$(PPSBOARDS)),$(REPORTDIR)/pps-mcimx7d.json); fi

## bench-tee: the TrustZone-partitioned image against the unpartitioned one, bounce, sg and tso (tamanic-bench
## -tee-only; not timed alone: the partitioned image's rows took 2.1 min of session 13's make bench, and this
## measures the unpartitioned image again beside them), into build/bench/tee-report.md; its own target since session 14, to keep make
## bench under 25 minutes with the i.MX7D's small-datagram and request/response rows
bench-tee:
	@mkdir -p build/bench
	$(GO) run ./qemu/cmd/tamanic-bench -board mx6ullevk -tee-only -size $(BENCHSIZE) -runs 3 -o build/bench

# sabrelite and usbarmory: two runs a configuration (their tables are the
# ENET's again on another SoC; the mx6ullevk and the i.MX7D take three)
bench-qemu:
	@for b in $(BENCHBOARDS); do \
	  runs=3; [ $$b = sabrelite -o $$b = usbarmory ] && runs=2; \
	  $(GO) run ./qemu/cmd/tamanic-bench -board $$b -size $(BENCHSIZE) -runs $$runs -o build/bench$$([ $$b = mx6ullevk ] || echo -$$b) \
	    $$([ $$b = mx6ullevk -o $$b = mcimx7d ] && echo -rr) $$([ $$b = mx6ullevk ] && echo -tee=false) \
	    $$([ -f build/bench/host-benchstat.txt ] && echo -host build/bench/host-benchstat.txt) || exit 1; \
	done
	$(GO) run ./qemu/cmd/tamanic-bench -compare build/bench/boards.md \
	  $(foreach b,$(BENCHBOARDS),$(b)=build/bench$(if $(filter-out mx6ullevk,$(b)),-$(b)))
	@if [ $(REPORTDIR) = build/bench ] && [ -f build/bench-mcimx7d/rr.md ] && echo " $(BENCHBOARDS) " | grep -q " mcimx7d "; then \
	  { printf '\n## The i.MX7D: request/response on ENET1 and the 82574L (from build/bench-mcimx7d/rr.md)\n'; cat build/bench-mcimx7d/rr.md; } >> build/bench/report.md; fi

## bench-targets: issue 16's cost targets (closed, every target met): tamanic-cost on stock gVisor, then with
## docs/gvisor-patches/ (about 5 min), into build/bench/targets.md; its own target since session 13, to keep
## make bench under 25 minutes with the cache model's and the small-datagram rows
bench-targets:
	@mkdir -p build/bench
	GVISOR_PATCHES=0 scripts/gvisor-patched.sh -warm -runs 3 -size $(BENCHSIZE) -cfg $(COSTCFG) -o build/bench/cost-stock -json build/bench/cost-stock.json
	scripts/gvisor-patched.sh -warm -runs 3 -size $(BENCHSIZE) -cfg $(COSTCFG) -o build/bench/cost-gvisor -json build/bench/cost-gvisor.json
	$(GO) run ./qemu/cmd/tamanic-bench -targets build/bench/targets.md build/bench/cost-stock.json build/bench/cost-gvisor.json

# BenchmarkRxCopybreak (30 sub-benchmarks, the model delivering each op's
# 128 frames off the timer) at 20 ops each: at 200ms it took 110 of
# bench-host's 4.3 minutes; held-B/pkt and allocs/op do not depend on it
bench-host:
	@mkdir -p build/bench
	$(GO) test -run '^$$' -bench . -skip BenchmarkRxCopybreak -benchtime 200ms -count $(BENCHCOUNT) ./bounce/ ./fec/ ./tso/ ./internal/pkt/ ./connectx/ > build/bench/host.txt
	$(GO) test -run '^$$' -bench BenchmarkRxCopybreak -benchtime 20x -count $(BENCHCOUNT) ./fec/ >> build/bench/host.txt
	$(GO) test -run '^$$' -bench . -benchtime 2x -count $(BENCHCOUNT) ./netstack/ >> build/bench/host.txt
	$(GO) tool benchstat build/bench/host.txt > build/bench/host-benchstat.txt
	cat build/bench/host-benchstat.txt

## soak: the firmware under QEMU for SOAK (64 connections both ways through sink and source, UDP echo,
## every byte checked, /stats heap, goroutines, held packets, ring and error counters watched), the
## QEMU connect flood, then the two host models with faults injected under the same load. Not part of test.
SOAK ?= 3m
soak:
	$(GO) test ./qemu -count=1 -run 'TestSoak$$|TestConnectFlood$$' -v -timeout 60m -soak $(SOAK)
	$(GO) test ./netstack -count=1 -run 'TestSoakHostModels$$' -v -timeout 60m -soak $(SOAK)

## campaign: the stall campaign (issue 17): CAMPAIGN repetitions of every host transfer configuration
CAMPAIGN ?= 10
campaign:
	bash -o pipefail -c "$(GO) test ./netstack -count=1 -run TestCampaign -v -timeout 120m -campaign $(CAMPAIGN) -campaign.out build/campaign 2>&1 | grep -v -e '^=== RUN' -e '--- PASS'"

clean:
	rm -rf build
