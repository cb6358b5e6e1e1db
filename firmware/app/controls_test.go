package app

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/fec"
)

func TestStatsShowTheLink(t *testing.T) {
	st := fec.Stats{Link: fec.Link{Up: true, Speed: 10}, LinkUps: 2, LinkDowns: 1}
	b, err := json.Marshal(NICStats{Link: linkStats(st)})
	if err != nil {
		t.Fatal(err)
	}
	want := `"link":{"up":true,"speed_mbps":10,"duplex":"half","ups":2,"downs":1}`
	if !strings.Contains(string(b), want) {
		t.Fatalf("%s lacks %s", b, want)
	}
}
