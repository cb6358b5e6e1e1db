package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// fakeCtl records mode changes.
type fakeCtl struct {
	tx  string
	cb  int
	set int
}

func (f *fakeCtl) SetMode(tx string, cb *int) error {
	f.set++
	f.tx = tx
	if cb != nil {
		f.cb = *cb
	}
	return nil
}
func (f *fakeCtl) Mode() (string, int)    { return f.tx, f.cb }
func (f *fakeCtl) Stats() any             { return nil }
func (f *fakeCtl) IdleNanoseconds() int64 { return 0 }

func postMode(s *Server, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/mode?tx=bounce&copybreak=64&hash=0", nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	s.mode(w, r)
	return w
}

// TestControlPortClosedWithoutToken: an image built without a control
// token refuses every POST /mode with 403 and changes nothing, whatever
// the request carries.
func TestControlPortClosedWithoutToken(t *testing.T) {
	if BuildControlToken != "" {
		t.Skip("test binary linked with a control token")
	}
	for _, auth := range []string{"", "Bearer ", "Bearer secret", "Basic c2VjcmV0"} {
		ctl := &fakeCtl{tx: "tso", cb: 512}
		s := &Server{Ctl: ctl}
		w := postMode(s, auth)
		if w.Code != http.StatusForbidden {
			t.Errorf("auth %q: status %d, want 403", auth, w.Code)
		}
		if ctl.set != 0 || ctl.tx != "tso" || ctl.cb != 512 || s.noHash.Load() {
			t.Errorf("auth %q: refused request changed the mode: %+v hash off %v", auth, ctl, s.noHash.Load())
		}
	}
}

// TestControlPortToken: with a token, only the exact bearer token is
// accepted (401 otherwise, with a WWW-Authenticate challenge) and a refused
// request changes nothing.
func TestControlPortToken(t *testing.T) {
	for _, c := range []struct {
		auth string
		code int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer secre", http.StatusUnauthorized},
		{"Bearer secret2", http.StatusUnauthorized},
		{"bearer secret", http.StatusUnauthorized},
		{"Basic secret", http.StatusUnauthorized},
		{"Bearer secret", http.StatusOK},
	} {
		ctl := &fakeCtl{tx: "tso", cb: 512}
		s := &Server{Ctl: ctl, ControlToken: "secret"}
		w := postMode(s, c.auth)
		if w.Code != c.code {
			t.Errorf("auth %q: status %d, want %d (%s)", c.auth, w.Code, c.code, w.Body)
			continue
		}
		if c.code == http.StatusOK {
			if ctl.tx != "bounce" || ctl.cb != 64 || !s.noHash.Load() {
				t.Errorf("authorised request not applied: %+v hash off %v", ctl, s.noHash.Load())
			}
			continue
		}
		if w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("auth %q: 401 without a WWW-Authenticate challenge", c.auth)
		}
		if ctl.set != 0 || s.noHash.Load() {
			t.Errorf("auth %q: refused request changed the mode: %+v", c.auth, ctl)
		}
	}
}

// TestGCNeedsTokenAndCollects: POST /gc is refused without the control
// token (403 on an image without one, 401 with a wrong one) and, with it,
// runs a collection and answers the runtime statistics after it.
func TestGCNeedsTokenAndCollects(t *testing.T) {
	post := func(s *Server, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/gc", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		s.gc(w, r)
		return w
	}
	if BuildControlToken == "" {
		if w := post(&Server{Ctl: &fakeCtl{}}, "Bearer x"); w.Code != http.StatusForbidden {
			t.Errorf("no token in the image: status %d, want 403", w.Code)
		}
	}
	s := &Server{Ctl: &fakeCtl{}, ControlToken: "secret"}
	if w := post(s, "Bearer secre"); w.Code != http.StatusUnauthorized {
		t.Errorf("wrong token: status %d, want 401", w.Code)
	}
	before := runtimeStats().NumGC
	w := post(s, "Bearer secret")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var rs RuntimeStats
	if err := json.Unmarshal(w.Body.Bytes(), &rs); err != nil {
		t.Fatal(err)
	}
	if rs.NumGC <= before || rs.HeapAlloc == 0 {
		t.Errorf("after POST /gc: %d collections (%d before), heap_alloc %d", rs.NumGC, before, rs.HeapAlloc)
	}
}
