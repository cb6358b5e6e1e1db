package qemu

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteTables writes a benchmark's rows as name.json and its tables as
// name.md in out, prints the tables, and appends them to the report.md
// beside them when there is one (make bench's report): what
// tamanic-bench -rr and tamanic-pps both leave behind.
func WriteTables(out, name string, rows any, tables string) error {
	js, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return fmt.Errorf("qemu: encoding %s.json: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(out, name+".json"), js, 0o644); err != nil {
		return err
	}
	fmt.Print(tables)
	if err := os.WriteFile(filepath.Join(out, name+".md"), []byte(tables), 0o644); err != nil {
		return err
	}
	rep := filepath.Join(out, "report.md")
	if _, err := os.Stat(rep); err != nil {
		return nil
	}
	f, err := os.OpenFile(rep, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, tables); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
