module github.com/tamanic/tamanic

go 1.26.0

tool (
	github.com/usbarmory/tamago/cmd/tamago
	golang.org/x/perf/cmd/benchstat
)

require (
	github.com/google/gopacket v1.1.19
	github.com/usbarmory/GoTEE v0.0.0-20250811152814-d8456103e1fc
	github.com/usbarmory/tamago v1.26.0
	gonum.org/v1/plot v0.17.0
	gvisor.dev/gvisor v0.0.0-20260518063529-209a0ce076a1
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/google/btree v1.1.2 // indirect
	golang.org/x/exp v0.0.0-20260824195058-e88cd73687aa // indirect
	golang.org/x/image v0.46.0 // indirect
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)
