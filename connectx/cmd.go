package connectx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/mmio"
)

// Command interface errors.
var (
	// ErrTimeout: the card did not answer in time (firmware start-up, a
	// command, or a page request); the command queue is then unusable.
	ErrTimeout = errors.New("connectx: timed out waiting for the card")
	// ErrCmdIfRev: the card speaks another command interface revision.
	ErrCmdIfRev = errors.New("connectx: unsupported command interface revision")
	// ErrDead: an earlier command timed out; no further command is sent.
	ErrDead = errors.New("connectx: command interface unusable after a timeout")
)

// DeliveryError is a command the card rejected before executing it
// (status_own delivery status): a malformed entry or mailbox chain.
type DeliveryError struct {
	Op     uint16
	Status uint8
}

func (e *DeliveryError) Error() string {
	return fmt.Sprintf("connectx: command %#x not delivered: delivery status %#x", e.Op, e.Status)
}

// CmdError is a command the card executed and failed, with its status and
// syndrome.
type CmdError struct {
	Op       uint16
	OpMod    uint16
	Status   CmdStatus
	Syndrome uint32
}

func (e *CmdError) Error() string {
	return fmt.Sprintf("connectx: command %#x (op_mod %d) failed: %v, syndrome %#x", e.Op, e.OpMod, e.Status, e.Syndrome)
}

// regs reads and writes big-endian card registers through a little-endian
// 32-bit MMIO interface (Linux ioread32be/iowrite32be).
type regs struct{ r mmio.Regs }

func (r regs) read(off uint32) uint32     { return bits.ReverseBytes32(r.r.Read32(off)) }
func (r regs) write(off uint32, v uint32) { r.r.Write32(off, bits.ReverseBytes32(v)) }

// cmdq is the command queue: slot 0 only, polled.
type cmdq struct {
	bar     regs
	mem     dma.Memory
	q       dma.Buffer   // the queue page
	mboxIn  []dma.Buffer // 4 KiB-aligned mailbox blocks (alignment: see model)
	mboxOut []dma.Buffer
	token   uint8
	timeout time.Duration
	dead    bool
	sleep   func()
	now     func() time.Time
	count   int // commands executed
}

// maxMailboxes bounds one command's chain each way (512 bytes each).
const maxMailboxes = 16

func (c *cmdq) alloc() error {
	var err error
	if c.q, err = c.mem.Alloc(PageSize, PageSize, dma.Coherent); err != nil {
		return fmt.Errorf("connectx: command queue: %w", err)
	}
	clear(c.q.Bytes())
	for i := 0; i < 2*maxMailboxes; i++ {
		b, err := c.mem.Alloc(MailboxSize, PageSize, dma.Coherent)
		if err != nil {
			return fmt.Errorf("connectx: command mailboxes: %w", err)
		}
		if i < maxMailboxes {
			c.mboxIn = append(c.mboxIn, b)
		} else {
			c.mboxOut = append(c.mboxOut, b)
		}
	}
	return nil
}

func (c *cmdq) free() {
	for _, b := range append(c.mboxIn, c.mboxOut...) {
		_ = c.mem.Free(b)
	}
	c.mboxIn, c.mboxOut = nil, nil
	if c.q.Valid() {
		_ = c.mem.Free(c.q)
		c.q = dma.Buffer{}
	}
}

// chain lays msg (past its first 16 bytes) into mailboxes mb with token t
// and returns the address of the first, or 0 when none is needed.
func chain(mb []dma.Buffer, n int, msg []byte, t uint8) uint64 {
	var m Mailbox
	cnt := Mailboxes(n)
	for i := cnt - 1; i >= 0; i-- {
		clear(m.Data[:])
		lo := CmdInlineSize + i*MailboxData
		if lo < len(msg) {
			copy(m.Data[:], msg[lo:min(len(msg), lo+MailboxData)])
		}
		m.Next, m.BlockNum, m.Token = 0, uint32(i), t
		if i+1 < cnt {
			m.Next = uint64(mb[i+1].Addr())
		}
		m.Encode(mb[i].Bytes())
	}
	if cnt == 0 {
		return 0
	}
	return uint64(mb[0].Addr())
}

// exec runs one command: in is the whole input message, outLen the output
// length expected. It returns the output on success.
func (c *cmdq) exec(in []byte, outLen int) ([]byte, error) {
	op, opmod := uint16(InOpcode.Get(in)), uint16(InOpMod.Get(in))
	if c.dead {
		return nil, fmt.Errorf("connectx: command %#x: %w", op, ErrDead)
	}
	if Mailboxes(len(in)) > maxMailboxes || Mailboxes(outLen) > maxMailboxes {
		return nil, fmt.Errorf("connectx: command %#x: %d/%d bytes exceed %d mailboxes", op, len(in), outLen, maxMailboxes)
	}
	slot := c.q.Bytes()[:CmdEntrySize]
	if loadBytes(slot, cmdToken)[3]&CmdOwnerHW != 0 {
		c.dead = true
		return nil, fmt.Errorf("connectx: command %#x: slot still owned by the card: %w", op, ErrTimeout)
	}
	c.token++
	if c.token == 0 {
		c.token = 1
	}
	e := CmdEntry{InLen: uint32(len(in)), OutLen: uint32(outLen), Token: c.token}
	copy(e.In[:], in)
	e.InPtr = chain(c.mboxIn, len(in), in, c.token)
	e.OutPtr = chain(c.mboxOut, outLen, nil, c.token)
	e.Encode(slot)
	c.mem.Barrier()
	w := loadBytes(slot, cmdToken)
	w[3] |= CmdOwnerHW // ownership last, after the entry
	storeBE32(slot, cmdToken, binary.BigEndian.Uint32(w[:]))
	c.mem.Barrier()
	c.bar.write(InitCmdDbell, 1<<0)
	deadline := c.now().Add(c.timeout)
	for loadBytes(slot, cmdToken)[3]&CmdOwnerHW != 0 {
		if c.now().After(deadline) {
			c.dead = true
			return nil, fmt.Errorf("connectx: command %#x (op_mod %d): no completion within %v: %w", op, opmod, c.timeout, ErrTimeout)
		}
		c.sleep()
	}
	c.mem.Barrier() // read the output only after seeing ownership return
	c.count++
	if ds := slot[cmdStatusOwn] >> 1; ds != DeliveryOK {
		return nil, &DeliveryError{Op: op, Status: ds}
	}
	out := make([]byte, max(outLen, CmdInlineSize))
	copy(out, slot[cmdOut:cmdOut+CmdInlineSize])
	for i := 0; i < Mailboxes(outLen); i++ {
		b := c.mboxOut[i].Bytes()
		lo := CmdInlineSize + i*MailboxData
		copy(out[lo:min(outLen, lo+MailboxData)], b)
	}
	if st := CmdStatus(out[0]); st != StatOK {
		return nil, &CmdError{Op: op, OpMod: opmod, Status: st, Syndrome: binary.BigEndian.Uint32(out[4:])}
	}
	return out[:outLen], nil
}

// newIn returns a zeroed input message of n bytes with its opcode and op_mod.
func newIn(op, opmod uint16, n int) []byte {
	in := make([]byte, n)
	InOpcode.Set(in, uint32(op))
	InOpMod.Set(in, uint32(opmod))
	return in
}
