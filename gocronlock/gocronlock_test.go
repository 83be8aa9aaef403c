package gocronlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/gocronlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	_ "github.com/distlock/distlock/memory"
	_ "github.com/distlock/distlock/redis"
	_ "github.com/distlock/distlock/zookeeper"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
)

// backends are an Expiring backend and a session-bound one.
var backends = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"redis", func(t *testing.T) string {
		return "redis://" + testserver.Redis(t, testserver.RedisConfig{}).Addr() + "/0"
	}},
	{"zookeeper", func(t *testing.T) string {
		return "zookeeper://" + testserver.ZooKeeper(t, testserver.ZooKeeperConfig{}).Addr() + "/gocronlock"
	}},
}

func open(t *testing.T, url string) *distlock.Locker {
	t.Helper()
	l, err := distlock.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// scheduler starts a gocron scheduler whose jobs lock through l.
func scheduler(t *testing.T, opts ...gocron.SchedulerOption) gocron.Scheduler {
	t.Helper()
	s, err := gocron.NewScheduler(opts...)
	if err != nil {
		t.Fatalf("NewScheduler: %v", err)
	}
	s.Start()
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

// runAt schedules a one-time job named name on s at at; done gets whether
// the job ran (true) or was skipped because the lock was taken (false).
func runAt(t *testing.T, s gocron.Scheduler, name string, at time.Time, runs *atomic.Int32, done chan<- bool) {
	t.Helper()
	_, err := s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartDateTime(at)),
		gocron.NewTask(func() { runs.Add(1); time.Sleep(10 * time.Millisecond) }),
		gocron.WithName(name),
		gocron.WithEventListeners(
			gocron.AfterJobRuns(func(_ uuid.UUID, _ string) { done <- true }),
			gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
				if !errors.Is(err, distlock.ErrNotAcquired) {
					t.Errorf("lock error: %v, want ErrNotAcquired", err)
				}
				done <- false
			})))
	if err != nil {
		t.Fatalf("NewJob: %v", err)
	}
}

// TestLateTimerRunsOnceWithMinHold: two schedulers whose timers fire 100ms
// apart, the second after the first's 10ms job has returned. Without a
// minimum hold the job runs twice (the hole of gocron#841); with
// WithMinHold it runs once.
func TestLateTimerRunsOnceWithMinHold(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			for _, c := range []struct {
				name string
				opts []distlock.Option
				want int32
			}{
				{"no-min-hold", nil, 2},
				{"min-hold", []distlock.Option{distlock.WithMinHold(5 * time.Second)}, 1},
			} {
				t.Run(c.name, func(t *testing.T) {
					var runs atomic.Int32
					done := make(chan bool, 2)
					var ss []gocron.Scheduler
					for range 2 {
						lk, err := gocronlock.NewLocker(open(t, url), "jobs/"+c.name+"/", c.opts...)
						if err != nil {
							t.Fatal(err)
						}
						ss = append(ss, scheduler(t, gocron.WithDistributedLocker(lk)))
					}
					runAt(t, ss[0], "report", time.Now().Add(50*time.Millisecond), &runs, done)
					wait(t, done)
					// The second host's timer fires late, after the job ended.
					runAt(t, ss[1], "report", time.Now().Add(100*time.Millisecond), &runs, done)
					wait(t, done)
					if got := runs.Load(); got != c.want {
						t.Errorf("job ran %d times across two schedulers, want %d", got, c.want)
					}
				})
			}
		})
	}
}

func wait(t *testing.T, done <-chan bool) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("job neither ran nor was skipped within 30s")
	}
}

// TestElectorOneLeader: of two schedulers' Electors exactly one leads; when
// it stops campaigning the other takes over.
func TestElectorOneLeader(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			var els []*gocronlock.Elector
			var stops []context.CancelFunc
			for i, id := range []string{"a", "b"} {
				e, err := distlock.NewElection(open(t, url), "scheduler", id,
					distlock.WithTermOptions(distlock.WithTTL(2*time.Second)))
				if err != nil {
					t.Fatal(err)
				}
				el, err := gocronlock.NewElector(e)
				if err != nil {
					t.Fatal(err)
				}
				ctx, stop := context.WithCancel(t.Context())
				el.Start(ctx)
				els, stops = append(els, el), append(stops, stop)
				t.Cleanup(func() { stops[i](); <-el.Done() })
			}
			leader := awaitLeader(t, els)
			other := 1 - leader
			if err := els[other].IsLeader(t.Context()); !errors.Is(err, gocronlock.ErrNotLeader) {
				t.Fatalf("both lead, or the follower says %v", err)
			}
			stops[leader]()
			<-els[leader].Done()
			if err := els[leader].IsLeader(t.Context()); !errors.Is(err, gocronlock.ErrNotLeader) {
				t.Errorf("stopped elector still leads: %v", err)
			}
			if awaitLeader(t, els) != other {
				t.Errorf("the remaining candidate did not take over")
			}
		})
	}
}

// awaitLeader waits (bounded) until exactly one Elector leads.
func awaitLeader(t *testing.T, els []*gocronlock.Elector) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		leader, n := -1, 0
		for i, el := range els {
			if el.IsLeader(t.Context()) == nil {
				leader, n = i, n+1
			}
		}
		if n > 1 {
			t.Fatalf("%d Electors lead at once", n)
		}
		if n == 1 {
			return leader
		}
	}
	t.Fatalf("no Elector leads within 30s")
	return -1
}

func TestNewLockerRefusesBadInput(t *testing.T) {
	if _, err := gocronlock.NewLocker(nil, ""); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("nil Locker: %v", err)
	}
	l, err := distlock.Open(t.Context(), "mem://gocronlock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := gocronlock.NewLocker(l, "", distlock.WithMinHold(-time.Second)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("negative min hold: %v", err)
	}
	if _, err := gocronlock.NewElector(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("nil Election: %v", err)
	}
}
