// Package imximage reads the board DCD files (board/*/imximage.cfg) that
// U-Boot's mkimage packs into an i.MX boot image (mkimage -T imximage), so
// host tests can check what the boot ROM will write before the firmware
// runs: register addresses, DDR geometry, the DCD's size.
//
// The format is mkimage's (U-Boot doc/imx/mkimage/imximage.txt): one
// command a line, '#' starts a comment, fields separated by blanks or
// commas. The boot ROM's side is the i.MX6/i.MX7 reference manuals'
// "Device Configuration Data (DCD)" section.
package imximage

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// MaxDCDSize is the largest DCD the i.MX6 and i.MX7 boot ROMs accept, in
// bytes, header included (RM, "Device Configuration Data (DCD)": 1768).
const MaxDCDSize = 1768

// Op is a DCD command.
type Op string

// The DCD commands mkimage's imximage v2 format knows.
const (
	Data         Op = "DATA"           // write Value to Addr
	CheckBitsSet Op = "CHECK_BITS_SET" // wait until Addr & Value == Value
	CheckBitsClr Op = "CHECK_BITS_CLR" // wait until Addr & Value == 0
	ClrBits      Op = "CLR_BITS"       // Addr &^= Value
	SetBits      Op = "SET_BITS"       // Addr |= Value
)

// Cmd is one DCD command: Width bytes at Addr.
type Cmd struct {
	Line  int
	Op    Op
	Width int
	Addr  uint32
	Value uint32
}

// Config is a parsed imximage.cfg.
type Config struct {
	Version  int    // IMAGE_VERSION
	BootFrom string // BOOT_FROM
	CSF      uint32 // CSF size, 0 if none
	DCD      []Cmd
}

// ParseFile parses the imximage.cfg at path.
func ParseFile(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse reads an imximage.cfg.
func Parse(r io.Reader) (*Config, error) {
	c := &Config{}
	s := bufio.NewScanner(r)
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' })
		if len(f) == 0 {
			continue
		}
		switch op := Op(f[0]); op {
		case "IMAGE_VERSION":
			if len(f) != 2 {
				return nil, fmt.Errorf("line %d: IMAGE_VERSION takes one value", n)
			}
			v, err := strconv.Atoi(f[1])
			if err != nil {
				return nil, fmt.Errorf("line %d: IMAGE_VERSION: %w", n, err)
			}
			c.Version = v
		case "BOOT_FROM":
			if len(f) != 2 {
				return nil, fmt.Errorf("line %d: BOOT_FROM takes one device", n)
			}
			c.BootFrom = f[1]
		case "CSF":
			if len(f) != 2 {
				return nil, fmt.Errorf("line %d: CSF takes one size", n)
			}
			v, err := strconv.ParseUint(f[1], 0, 32)
			if err != nil {
				return nil, fmt.Errorf("line %d: CSF: %w", n, err)
			}
			c.CSF = uint32(v)
		case Data, CheckBitsSet, CheckBitsClr, ClrBits, SetBits:
			if len(f) != 4 {
				return nil, fmt.Errorf("line %d: %s takes width, address and value", n, op)
			}
			w, err := strconv.Atoi(f[1])
			if err != nil || w != 1 && w != 2 && w != 4 {
				return nil, fmt.Errorf("line %d: %s: width %q: want 1, 2 or 4", n, op, f[1])
			}
			a, err := strconv.ParseUint(f[2], 0, 32)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: address: %w", n, op, err)
			}
			v, err := strconv.ParseUint(f[3], 0, 32)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: value: %w", n, op, err)
			}
			if a%uint64(w) != 0 {
				return nil, fmt.Errorf("line %d: %s: address %#x not aligned to its width %d", n, op, a, w)
			}
			c.DCD = append(c.DCD, Cmd{Line: n, Op: op, Width: w, Addr: uint32(a), Value: uint32(v)})
		default:
			return nil, fmt.Errorf("line %d: unknown command %q", n, f[0])
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// DCDSize is the size in bytes of the DCD mkimage builds from c: a 4-byte
// DCD header, then one 4-byte command header for each run of consecutive
// commands of the same kind and width, and 8 bytes (address, value or
// mask) for each command.
func (c *Config) DCDSize() int {
	size := 4
	for i, d := range c.DCD {
		if i == 0 || d.Op != c.DCD[i-1].Op || d.Width != c.DCD[i-1].Width || d.Op != Data {
			size += 4
		}
		size += 8
	}
	return size
}

// Last returns the value of the last Data write to addr and whether there
// is one.
func (c *Config) Last(addr uint32) (uint32, bool) {
	for i := len(c.DCD) - 1; i >= 0; i-- {
		if d := c.DCD[i]; d.Op == Data && d.Addr == addr {
			return d.Value, true
		}
	}
	return 0, false
}
