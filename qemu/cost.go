package qemu

import (
	"encoding/json"
	"fmt"
	"os"
)

// CostRun is one transfer measured by tamanic-cost (its -json output): the
// guest's instructions per MiB under -icount shift=0, split by the
// firmware's stage timers, for the firmware as built (stock gVisor, or
// gVisor with the patches in docs/gvisor-patches/ that GVisorPatches
// names, applied by scripts/gvisor-patched.sh).
type CostRun struct {
	Board         string   `json:"board"`
	Dir           string   `json:"dir"` // tx (guest to host) or rx (host to guest)
	Mode          string   `json:"mode"`
	Copybreak     int      `json:"copybreak"`
	Run           int      `json:"run"`
	Bytes         int64    `json:"bytes"`
	GVisorPatches []string `json:"gvisor_patches"`
	// Instructions per MiB: busy (all but the idle loop), the NIC
	// interrupt handler, the endpoint's receive passes and its transmit
	// calls; the rest is gVisor's TCP, the application and the scheduler.
	Busy float64 `json:"busy_per_mib"`
	IRQ  float64 `json:"irq_per_mib"`
	RX   float64 `json:"endpoint_rx_per_mib"`
	TX   float64 `json:"endpoint_tx_per_mib"`
}

// ReadCostRuns reads a tamanic-cost -json file.
func ReadCostRuns(path string) ([]CostRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("qemu: reading cost runs: %w", err)
	}
	var rs []CostRun
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, fmt.Errorf("qemu: decoding cost runs %s: %w", path, err)
	}
	return rs, nil
}
