package connectx

// Register is one init-segment register's value, named as in Linux's
// include/linux/mlx5/device.h (struct mlx5_init_seg, struct
// health_buffer), in the card's byte order converted to the CPU's.
type Register struct {
	Name   string
	Offset uint32
	Value  uint32
}

// initSegDump are the registers Registers reads: the firmware and command
// interface revisions, the command queue's address, the initializing
// flag, the health buffer (at InitHealth: assert_var[0..5],
// assert_exit_ptr, assert_callra, time, fw_ver, hw_id, the word holding
// rfr_severity, the word holding irisc_index, synd and ext_synd) and the
// health counter: what Linux's mlx5 health reporter prints
// (health.c print_health_info) when the card stops. Not the command
// doorbell.
var initSegDump = []struct {
	name string
	off  uint32
}{
	{"FW_REV", InitFWRev}, {"CMDIF_REV_FW_SUB", InitCmdIfRev},
	{"CMDQ_ADDR_H", InitCmdqAddrH}, {"CMDQ_ADDR_L_SZ", InitCmdqAddrLSz},
	{"INITIALIZING", InitInitializing},
	{"ASSERT_VAR0", InitHealth + 0x00}, {"ASSERT_VAR1", InitHealth + 0x04}, {"ASSERT_VAR2", InitHealth + 0x08},
	{"ASSERT_VAR3", InitHealth + 0x0C}, {"ASSERT_VAR4", InitHealth + 0x10}, {"ASSERT_VAR5", InitHealth + 0x14},
	{"ASSERT_EXIT_PTR", InitHealth + 0x20}, {"ASSERT_CALLRA", InitHealth + 0x24},
	{"HEALTH_TIME", InitHealth + 0x2C}, {"HEALTH_FW_VER", InitHealth + 0x30}, {"HEALTH_HW_ID", InitHealth + 0x34},
	{"RFR_SEVERITY", InitHealth + 0x38}, {"IRISC_SYND", InitHealth + 0x3C},
	{"HEALTH_COUNTER", InitHealthCount},
}

// Registers reads the init segment's registers a developer asks for
// first, for the firmware's GET /debug/regs. None has a side effect on
// read (the health counter is the card's, not cleared by reading).
func (n *NIC) Registers() []Register {
	out := make([]Register, 0, len(initSegDump))
	for _, r := range initSegDump {
		out = append(out, Register{r.name, r.off, n.bar.read(r.off)})
	}
	return out
}
