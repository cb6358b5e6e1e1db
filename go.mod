module github.com/tamanic/tamanic

go 1.26.0

tool github.com/usbarmory/tamago/cmd/tamago

require (
	github.com/google/gopacket v1.1.19
	gvisor.dev/gvisor v0.0.0-20260518063529-209a0ce076a1
)

require (
	github.com/google/btree v1.1.2 // indirect
	github.com/usbarmory/tamago v1.26.0 // indirect
	golang.org/x/exp v0.0.0-20250711185948-6ae5c78190dc // indirect
	golang.org/x/sys v0.43.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)
