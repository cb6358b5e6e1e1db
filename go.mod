module github.com/tamanic/tamanic

go 1.26.0

tool github.com/usbarmory/tamago/cmd/tamago

require (
	github.com/google/gopacket v1.1.19 // indirect
	github.com/usbarmory/tamago v1.26.0 // indirect
	gvisor.dev/gvisor v0.0.0-20260518063529-209a0ce076a1 // indirect
)
