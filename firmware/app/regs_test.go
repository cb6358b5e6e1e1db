package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// TestDebugRegs: GET /debug/regs answers the ENET's and the PHY's
// registers, named as in the manuals, as JSON and as text, with the
// control token only (401 without it, 403 on an image without one).
func TestDebugRegs(t *testing.T) {
	if BuildControlToken != "" {
		t.Skip("test binary linked with a control token")
	}
	r := fectest.NewRig(t, fectest.RigOptions{})
	if _, err := r.NIC.StartLink(fec.LinkConfig{}); err != nil {
		t.Fatal(err)
	}
	s := &Server{Ctl: &NICControls{NIC: r.NIC}, ControlToken: "secret"}
	get := func(url, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		s.debugRegs(w, req)
		return w
	}
	if w := get("/debug/regs", ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", w.Code)
	}
	w := get("/debug/regs", "Bearer secret")
	var groups []RegisterGroup
	if err := json.Unmarshal(w.Body.Bytes(), &groups); err != nil || w.Code != 200 {
		t.Fatalf("JSON: %d %v %s", w.Code, err, w.Body)
	}
	find := func(block, name string) (Register, bool) {
		for _, g := range groups {
			if strings.HasPrefix(g.Block, block) {
				for _, x := range g.Regs {
					if x.Name == name {
						return x, true
					}
				}
			}
		}
		return Register{}, false
	}
	// ECR as the driver left it: enabled (ETHEREN) with enhanced BDs.
	if ecr, ok := find("enet", "ECR"); !ok || ecr.Offset != fec.ENETx_ECR || ecr.Value&fec.ECR_ETHEREN == 0 {
		t.Errorf("enet ECR %+v", ecr)
	}
	if id, ok := find("phy@", "PHYIDR1"); !ok || id.Value == 0 || id.Value == 0xffff {
		t.Errorf("phy PHYIDR1 %+v (groups %+v)", id, groups)
	}
	w = get("/debug/regs?format=text", "Bearer secret")
	if !strings.Contains(w.Body.String(), "enet ECR      0x024 ") || !strings.Contains(w.Body.String(), "PHYIDR1") {
		t.Errorf("text:\n%s", w.Body)
	}
	s.ControlToken = ""
	if w := get("/debug/regs", "Bearer secret"); w.Code != http.StatusForbidden {
		t.Errorf("image without a token: %d", w.Code)
	}
}
