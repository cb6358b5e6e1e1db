package pcie

// Register is one register's value, named as in the reference manual.
type Register struct {
	Name   string
	Offset uint32
	Value  uint32
}

// Registers reads the root port's health registers through the DBI: the
// command/status and link control/status words of its configuration
// header, the port logic's link and LTSSM state (PL_DEBUG0/1), the port
// link control, the Gen2 control and the MSI controller, for the firmware's
// GET /debug/regs. None has a side effect on read.
func (rc *RC) Registers() []Register {
	regs := []struct {
		name string
		off  uint32
	}{
		{"COMMAND_STATUS", 0x04}, {"PL_LCR", plLCR}, {"PL_DEBUG0", plDebug0}, {"PL_DEBUG1", plDebug1},
		{"PL_G2CR", plG2CR}, {"PL_MSI_ADDR_LO", plMSIAddrLo}, {"PL_MSI_EN", plMSIEnable},
		{"PL_MSI_MASK", plMSIMask}, {"PL_MSI_STATUS", plMSIStatus},
	}
	out := make([]Register, 0, len(regs)+1)
	for _, r := range regs {
		out = append(out, Register{r.name, r.off, rc.dbi.Read32(r.off)})
	}
	if rc.expCap > 0 {
		off := uint32(rc.expCap+expLnkSta) &^ 3 // Link Control (15:0) and Link Status (31:16)
		out = append(out, Register{"LINK_CONTROL_STATUS", off, rc.dbi.Read32(off)})
	}
	return out
}
