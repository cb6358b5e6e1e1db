package app

// PatternDiff says where a sink transfer differed from the Pattern stream
// (PatternStream): the offsets of the first and last differing bytes and
// how many differed. A client that sends something else differs too; the
// soak sends the pattern, so a difference there is corruption, and its
// extent says what kind (one cache line, one segment, a whole buffer).
type PatternDiff struct {
	Bytes int64 `json:"bytes"` // the transfer's length
	First int64 `json:"first"`
	Last  int64 `json:"last"`
	Count int64 `json:"count"`
}

// SinkPatternStats is the /stats "sink_pattern" member.
type SinkPatternStats struct {
	Checked    int64         `json:"checked"`    // sink transfers compared with the pattern
	Mismatched int64         `json:"mismatched"` // of which differed
	Recent     []PatternDiff `json:"recent"`     // the first few that differed
}

// maxPatternDiffs bounds SinkPatternStats.Recent.
const maxPatternDiffs = 8

// patternCheck compares a stream with the pattern as it passes.
type patternCheck struct {
	off int64
	d   PatternDiff
}

func (p *patternCheck) add(b []byte) {
	for i, c := range b {
		at := p.off + int64(i)
		if c != Pattern[at%int64(len(Pattern))] {
			if p.d.Count == 0 {
				p.d.First = at
			}
			p.d.Last = at
			p.d.Count++
		}
	}
	p.off += int64(len(b))
}

// record counts a finished sink transfer and keeps its difference.
func (s *Server) recordPattern(p *patternCheck) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sinkPattern.Checked++
	if p.d.Count == 0 {
		return
	}
	s.sinkPattern.Mismatched++
	if len(s.sinkPattern.Recent) < maxPatternDiffs {
		p.d.Bytes = p.off
		s.sinkPattern.Recent = append(s.sinkPattern.Recent, p.d)
	}
}
