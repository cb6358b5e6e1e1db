package app

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// selfTester is a Controls with a run-time self-test that blocks until
// release is closed (to hold one test running).
type selfTester struct {
	*NICControls
	started chan struct{}
	release chan struct{}
	runs    int
	err     error
}

func (s *selfTester) SelfTest() (any, error) {
	s.runs++
	if s.started != nil {
		close(s.started)
		<-s.release
	}
	return map[string]int{"runs": s.runs}, s.err
}

// TestSelfTestEndpoint: POST /selftest needs the token (401 without, 403
// on an image without one), answers 501 on an interface without a
// run-time self-test, runs one at a time (409 while one runs) and answers
// the test's report as JSON, 500 when it could not run.
func TestSelfTestEndpoint(t *testing.T) {
	if BuildControlToken != "" {
		t.Skip("test binary linked with a control token")
	}
	st := &selfTester{}
	s := &Server{Ctl: st, ControlToken: "secret"}
	post := func(auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/selftest", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		s.selfTest(w, req)
		return w
	}
	if w := post(""); w.Code != http.StatusUnauthorized || st.runs != 0 {
		t.Fatalf("without the token: %d, %d runs", w.Code, st.runs)
	}
	w := post("Bearer secret")
	var rep map[string]int
	if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil || w.Code != 200 || rep["runs"] != 1 {
		t.Fatalf("with the token: %d %s (%v)", w.Code, w.Body, err)
	}
	st.started, st.release = make(chan struct{}), make(chan struct{})
	first := make(chan int)
	go func() { first <- post("Bearer secret").Code }()
	<-st.started
	if w := post("Bearer secret"); w.Code != http.StatusConflict {
		t.Errorf("a second test while one runs: %d, want 409", w.Code)
	}
	close(st.release)
	if c := <-first; c != 200 {
		t.Errorf("the test that ran: %d", c)
	}
	st.started, st.err = nil, errors.New("loopback on: restart failed")
	if w := post("Bearer secret"); w.Code != http.StatusInternalServerError {
		t.Errorf("a test that could not run: %d, want 500", w.Code)
	}
	s.Ctl = &NICControls{}
	if w := post("Bearer secret"); w.Code != http.StatusNotImplemented {
		t.Errorf("an interface without a run-time self-test: %d, want 501", w.Code)
	}
	s.ControlToken = ""
	if w := post("Bearer secret"); w.Code != http.StatusForbidden {
		t.Errorf("image without a token: %d", w.Code)
	}
}
