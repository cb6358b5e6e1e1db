module github.com/tamanic/tamanic/baseline

go 1.26.0

require (
	github.com/tamanic/tamanic v0.0.0-00010101000000-000000000000
	github.com/usbarmory/go-net v0.0.0-20251003201608-93d9ffe808de
	github.com/usbarmory/tamago v1.26.0
	gvisor.dev/gvisor v0.0.0-20260518063529-209a0ce076a1
)

require (
	github.com/google/btree v1.1.2 // indirect
	golang.org/x/exp v0.0.0-20260824195058-e88cd73687aa // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)

replace github.com/tamanic/tamanic => ../
