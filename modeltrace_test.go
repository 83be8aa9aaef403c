package distlock_test

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// modelTrace is what every model run records: a timestamped schedule (the
// first 3,000 lines) and its violations (the first 20). Its mu also guards
// the run's own state.
type modelTrace struct {
	start time.Time

	mu         sync.Mutex
	log        []string
	violations []string
}

func (r *modelTrace) logf(format string, args ...any) {
	line := fmt.Sprintf("%8.1fms ", float64(time.Since(r.start).Microseconds())/1000) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.log) < 3000 {
		r.log = append(r.log, line)
	}
}

func (r *modelTrace) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.logf("VIOLATION: %s", msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) < 20 {
		r.violations = append(r.violations, msg)
	}
}

// report is "" without violations, else what (the model) and seed's
// violations, the command that replays it, and the schedule.
func (r *modelTrace) report(what string, seed uint64, replay string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) == 0 {
		return ""
	}
	return fmt.Sprintf("%s violation, seed %d (replay: %s):\n  %s\nschedule:\n%s",
		what, seed, replay, strings.Join(r.violations, "\n  "), strings.Join(r.log, "\n"))
}
