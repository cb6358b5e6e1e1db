package e1000e

// Register is one register's value, named as in the 82574 datasheet.
type Register struct {
	Name   string
	Offset uint32
	Value  uint32
}

// dumpRegs are the registers Registers reads: control, status, interrupt
// mask, the RX and TX rings and their controls (82574 GbE Controller
// Family datasheet, 10.2). Not ICR (clear on read) nor the statistics
// (clear on read: HWStats accumulates them).
var dumpRegs = []struct {
	name string
	off  uint32
}{
	{"CTRL", CTRL}, {"STATUS", STATUS}, {"EECD", EECD}, {"CTRL_EXT", CTRL_EXT}, {"ITR", ITR},
	{"IMS", IMS}, {"RCTL", RCTL}, {"TCTL", TCTL}, {"TIPG", TIPG},
	{"RDBAL", RDBAL}, {"RDBAH", RDBAH}, {"RDLEN", RDLEN}, {"RDH", RDH}, {"RDT", RDT},
	{"RDTR", RDTR}, {"RXDCTL", RXDCTL}, {"RADV", RADV},
	{"TDBAL", TDBAL}, {"TDBAH", TDBAH}, {"TDLEN", TDLEN}, {"TDH", TDH}, {"TDT", TDT},
	{"TIDV", TIDV}, {"TXDCTL", TXDCTL}, {"TADV", TADV},
	{"RXCSUM", RXCSUM}, {"RFCTL", RFCTL}, {"RAL0", RAL0}, {"RAH0", RAH0},
}

// Registers reads the registers a developer asks for first (Linux's
// `ethtool -d` for e1000e reads these and more), for the firmware's GET
// /debug/regs. None has a side effect on read.
func (n *NIC) Registers() []Register {
	out := make([]Register, 0, len(dumpRegs))
	for _, r := range dumpRegs {
		out = append(out, Register{r.name, r.off, n.r.Read32(r.off)})
	}
	return out
}
