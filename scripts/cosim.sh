#!/bin/sh
# cosim.sh ELF CXSIM: run the i.MX7D firmware under QEMU driving the
# ConnectX model in tamanic-cxsim (make cosim). The guest RAM and the
# ConnectX BAR0 (QEMU's ivshmem-plain BAR2) are files in a temporary
# directory shared by both processes. Ctrl-C (or QEMU exiting) stops both.
# CXPORT: the model's wire (default 7700); HTTPPORT, SINKPORT, SOURCEPORT,
# ECHOPORT, IPERFPORT: host ports forwarded to ENET1's services (defaults
# 8080, 5001, 5002, 5007 UDP, 5201 TCP and UDP). CXSIMFLAGS: further
# tamanic-cxsim flags (e.g. -init-pages 12868).
# The QEMU arguments are laid out as qemu.Boot lays them out for the
# mcimx7d board with qemu.CosimArgs (ENET1 on a user network whose DHCP
# server leases 10.0.0.1, the address the forwards reach);
# qemu's TestCosimScriptArgs checks the two against each other.
set -eu
ELF=$1
CXSIM=$2
CXPORT=${CXPORT:-7700}
HTTPPORT=${HTTPPORT:-8080}
SINKPORT=${SINKPORT:-5001}
SOURCEPORT=${SOURCEPORT:-5002}
ECHOPORT=${ECHOPORT:-5007}
IPERFPORT=${IPERFPORT:-5201}
base=/tmp
[ -d /dev/shm ] && base=/dev/shm
DIR=$(mktemp -d "$base/tamanic-cosim-XXXXXX")
CXPID=
QPID=
TAILPID=
cleanup() {
	trap - EXIT INT TERM
	[ -n "$QPID" ] && kill "$QPID" 2>/dev/null || true
	if [ -n "$CXPID" ]; then
		kill -TERM "$CXPID" 2>/dev/null || true
		wait "$CXPID" 2>/dev/null || true
	fi
	sleep 0.2
	[ -n "$TAILPID" ] && kill "$TAILPID" 2>/dev/null || true
	rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

"$CXSIM" -ram "$DIR/ram" -ram-base 0x80000000 -bar "$DIR/bar" -listen "127.0.0.1:$CXPORT" ${CXSIMFLAGS:-} >"$DIR/cxsim.log" 2>&1 &
CXPID=$!
i=0
until grep -q '^CXSIM READY' "$DIR/cxsim.log"; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$CXPID" 2>/dev/null; then
		cat "$DIR/cxsim.log"
		exit 1
	fi
	sleep 0.1
done
cat <<MSG
== tamanic co-simulation: i.MX7D firmware (QEMU) + ConnectX model (tamanic-cxsim pid $CXPID)
== shared files:   $DIR/ram (guest RAM, bus 0x80000000), $DIR/bar (ConnectX BAR0)
== ConnectX wire:  127.0.0.1:$CXPORT, QEMU -netdev socket stream framing, one peer at a time.
==   The firmware answers at 10.0.3.1/24 there (sink 5001, source 5002, HTTP 80 /stats, echo 7).
==   Attach a peer, e.g. a Linux guest in a second QEMU:
==     qemu-system-x86_64 ... -netdev socket,id=cx,connect=127.0.0.1:$CXPORT -device e1000,netdev=cx
==   (give it 10.0.3.2/24), or any program speaking the framing (the Go test's peer: qemu.NewWirePeer).
== ENET1 (QEMU user network, DHCP lease 10.0.0.1): curl http://127.0.0.1:$HTTPPORT/stats
==   (nic.connectx reports the ConnectX); sink 127.0.0.1:$SINKPORT, source 127.0.0.1:$SOURCEPORT, echo udp and tcp 127.0.0.1:$ECHOPORT, iperf3 127.0.0.1:$IPERFPORT
== Ctrl-C stops QEMU and the model.
MSG
tail -n +1 -f "$DIR/cxsim.log" &
TAILPID=$!
fwd="hostfwd=tcp:127.0.0.1:$SINKPORT-10.0.0.1:5001,hostfwd=tcp:127.0.0.1:$SOURCEPORT-10.0.0.1:5002,hostfwd=tcp:127.0.0.1:$HTTPPORT-10.0.0.1:80,hostfwd=udp:127.0.0.1:$ECHOPORT-10.0.0.1:7,hostfwd=tcp:127.0.0.1:$ECHOPORT-10.0.0.1:7,hostfwd=tcp:127.0.0.1:$IPERFPORT-10.0.0.1:5201,hostfwd=udp:127.0.0.1:$IPERFPORT-10.0.0.1:5201"
qemu-system-arm -machine mcimx7d-sabre -cpu cortex-a7 -m 1G \
	-nographic -monitor none -serial stdio \
	-nic "user,model=imx.enet,net=10.0.0.0/24,host=10.0.0.2,dhcpstart=10.0.0.1,$fwd" \
	-kernel "$ELF" -semihosting \
	-machine memory-backend=ram \
	-object "memory-backend-file,id=ram,size=1G,mem-path=$DIR/ram,share=on" \
	-object "memory-backend-file,id=cxbar,size=32M,mem-path=$DIR/bar,share=on" \
	-device ivshmem-plain,memdev=cxbar,bus=dw-pcie &
QPID=$!
wait "$QPID" || true
QPID=
