// Package dhcp is a DHCPv4 client (RFC 2131, options of RFC 2132) for a
// gVisor stack, and the message codec it uses.
//
// The client runs the state machine of RFC 2131 §4.4: INIT and SELECTING
// (DHCPDISCOVER broadcast, the first acceptable DHCPOFFER taken),
// REQUESTING (DHCPREQUEST broadcast with the server identifier; DHCPACK
// binds, DHCPNAK or silence restarts; an ACKed address another host
// answers ARP probes for is declined, when the stack's ARP has duplicate
// address detection on), BOUND until T1, RENEWING (DHCPREQUEST
// unicast to the server that granted the lease) until T2, REBINDING
// (DHCPREQUEST broadcast to any server) until the lease expires, when the
// address and the routes it brought are removed and the client starts
// again. Retransmissions back off exponentially (4, 8, 16, 32, 64 s, then
// 64 s) with ±1 s of jitter (§4.1); in RENEWING and REBINDING the client
// waits half the time left, at least 60 s (§4.4.5). Whatever the servers
// answer, no two messages leave less than MinSendInterval (1 s) apart.
// Every reply is checked (BOOTREPLY, the transaction's xid, our hardware
// address, the expected message type, a server identifier, a host
// address of its subnet: not the network or broadcast address); what
// fails is counted in Stats and dropped. Lease times are computed in
// seconds (no overflow for any 32-bit lease); a T1 or T2 of 0 or out of
// order is taken as absent (§4.4.5 defaults); a router outside the
// subnet is refused (no default route) and counted.
//
// Before it holds a lease the client sends from 0.0.0.0: it adds the
// unspecified address to the NIC (gVisor then picks it as the source of
// packets to 255.255.255.255) and removes it once bound. gVisor's IPv4
// endpoint accepts packets to 255.255.255.255 on any enabled NIC, and its
// UDP demultiplexer hands them to the endpoint bound to port 68, so no raw
// or packet endpoint is needed.
package dhcp
