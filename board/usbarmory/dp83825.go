package usbarmory

import "github.com/tamanic/tamanic/fec"

// DP83825I register the board needs after every PHY reset (the values
// TamaGo's mk2 EnablePHY writes, board/usbarmory/mk2/enet.go): RCSR
// (0x17), RMII_CS (bit 7) selecting the 50 MHz RMII reference clock the
// SoC supplies, and RX_BUF (bit 0) of the receive elastic buffer size,
// set as TamaGo sets it.
const (
	dpRCSR       = 0x17
	dpRCSRRMIICS = 1 << 7
	dpRCSRRxBuf  = 1 << 0
)

// phyAddr is the DP83825I's MDIO address on the Mk II LAN.
const phyAddr = 0

// dp83825AfterReset restores the DP83825I setting a soft reset clears.
func dp83825AfterReset(p *fec.PHY) error {
	return p.NIC.MDIOWrite(p.Addr, dpRCSR, dpRCSRRMIICS|dpRCSRRxBuf)
}

// enet2Link is ENET2's link configuration: the DP83825I at phyAddr, RCSR
// restored after its reset. Plain Go, so the host test
// (dp83825_test.go) runs it against the ENET model's PHY.
func enet2Link() fec.LinkConfig {
	return fec.LinkConfig{Addrs: []int{phyAddr}, AfterReset: dp83825AfterReset}
}
