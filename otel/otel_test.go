package otel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	dotel "github.com/distlock/distlock/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// harness is an Observer recording to an in-memory metric reader and span
// recorder.
type harness struct {
	obs    *dotel.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newHarness(t *testing.T, opts ...dotel.Option) *harness {
	t.Helper()
	h := &harness{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = h.tp.Shutdown(context.Background())
	})
	obs, err := dotel.NewObserver(append([]dotel.Option{dotel.WithMeterProvider(mp), dotel.WithTracerProvider(h.tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h.obs = obs
	return h
}

func (h *harness) locker(t *testing.T, ns *memory.Namespace) *distlock.Locker {
	t.Helper()
	l, err := memory.New(ns, memory.WithDefaults(distlock.WithObserver(h.obs)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// point is one data point of an instrument: count and sum for histograms,
// value for sums.
type point struct {
	count uint64
	sum   float64
	min   float64
}

// collect returns every instrument's data points by their attributes,
// encoded as "k=v,k=v" (sorted by key).
func (h *harness) collect(t *testing.T) map[string]map[string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	enc := attribute.DefaultEncoder()
	out := map[string]map[string]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != dotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			pts := map[string]point{}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					mn, _ := dp.Min.Value()
					pts[dp.Attributes.Encoded(enc)] = point{count: dp.Count, sum: dp.Sum, min: mn}
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					mn, _ := dp.Min.Value()
					pts[dp.Attributes.Encoded(enc)] = point{count: dp.Count, sum: float64(dp.Sum), min: float64(mn)}
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					pts[dp.Attributes.Encoded(enc)] = point{sum: float64(dp.Value)}
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			out[m.Name] = pts
		}
	}
	return out
}

// waitSum waits up to 5s for the sum data point of name with attrs to be
// want.
func (h *harness) waitSum(t *testing.T, name, attrs string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, ok := h.collect(t)[name][attrs]
		if ok && p.sum == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s{%s} = %v (present %v) after 5s, want %v", name, attrs, p.sum, ok, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func keys[V any](m map[string]V) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, " | ")
}

// wantCounts checks that instrument name has exactly the data points of
// want (attributes → count for histograms, value for sums).
func wantPoints(t *testing.T, got map[string]map[string]point, name string, hist bool, want map[string]float64) {
	t.Helper()
	pts := got[name]
	if keys(pts) != keys(want) {
		t.Errorf("%s: data points\n  %s\nwant\n  %s", name, keys(pts), keys(want))
		return
	}
	for attrs, w := range want {
		p := pts[attrs]
		v := p.sum
		if hist {
			v = float64(p.count)
		}
		if v != w {
			t.Errorf("%s{%s} = %v, want %v", name, attrs, v, w)
		}
	}
}

const (
	acqAcquired = "distlock.backend=mem,distlock.op=acquire,distlock.outcome=acquired"
	acqBusy     = "distlock.backend=mem,distlock.op=acquire,distlock.outcome=busy"
	tryAcquired = "distlock.backend=mem,distlock.op=try-acquire,distlock.outcome=acquired"
	tryBusy     = "distlock.backend=mem,distlock.op=try-acquire,distlock.outcome=busy"
	acqClosed   = "distlock.backend=mem,distlock.op=acquire,distlock.outcome=closed"
)

// TestScenario runs the scripted scenario on mem:// — acquire, a refused
// TryAcquire, an Acquire that times out, release, a loss by expiry, a loss
// by a refused refresh and one by a refused automatic refresh, a lease
// ended by Close, an Acquire on a closed Locker — under a caller's span, and asserts every instrument's data
// points and every span.
func TestScenario(t *testing.T) {
	h := newHarness(t)
	ns := memory.NewNamespace()
	a, b := h.locker(t, ns), h.locker(t, ns)
	ctx, caller := h.tp.Tracer("test").Start(context.Background(), "caller")
	start := time.Now()

	// Acquire, then contention.
	lease, err := a.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "job"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	t0 := time.Now()
	_, err = b.Acquire(wctx, "job")
	waited := time.Since(t0)
	cancel()
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held key with a 100ms ctx: %v", err)
	}
	mid := h.collect(t)
	wantPoints(t, mid, dotel.MetricLeaseCount, false, map[string]float64{"distlock.backend=mem": 1})
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Loss by expiry.
	lost, err := a.TryAcquire(ctx, "job", distlock.WithTTL(50*time.Millisecond), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease with a 50ms TTL and no refresh not lost after 5s")
	}
	if c := distlock.Cause(lost.Err()); c != "expired" {
		t.Fatalf("cause %q (%v), want expired", c, lost.Err())
	}
	// LeaseEnded comes right after Done is closed, on the goroutine that
	// ended the lease (the refresh scheduler's, or this one's).
	h.waitSum(t, dotel.MetricLeaseLost, "distlock.backend=mem,distlock.cause=expired", 1)

	// Loss by a refused refresh: the lock disappeared from the server.
	gone, err := a.TryAcquire(ctx, "job2")
	if err != nil {
		t.Fatal(err)
	}
	ns.Expire("job2")
	if err := gone.Refresh(ctx, time.Second); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("Refresh of an expired lock: %v", err)
	}

	// Loss by a refused automatic refresh, on the refresh scheduler.
	// (Refreshed every ttl/3 = 300ms: a stall of more than the remaining
	// 590ms would lose it by expiry first.)
	auto, err := a.TryAcquire(ctx, "job5", distlock.WithTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ns.Expire("job5")
	select {
	case <-auto.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease whose lock was dropped not lost after 5s of automatic refreshes")
	}
	if c := distlock.Cause(auto.Err()); c != "refused" {
		t.Fatalf("cause %q (%v), want refused", c, auto.Err())
	}
	h.waitSum(t, dotel.MetricLeaseLost, "distlock.backend=mem,distlock.cause=refused", 2)

	// A lease ended by Close, then an Acquire on the closed Locker.
	c := h.locker(t, ns)
	if _, err := c.TryAcquire(ctx, "job3"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "job4"); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("Acquire on a closed Locker: %v", err)
	}
	caller.End()

	got := h.collect(t)
	wantPoints(t, got, dotel.MetricAcquireDuration, true, map[string]float64{
		acqAcquired: 1, tryBusy: 1, acqBusy: 1, tryAcquired: 4, acqClosed: 1})
	// Measured against the clock rather than the 100ms: on some VMs a
	// timer fires a few ms early.
	if p := got[dotel.MetricAcquireDuration][acqBusy]; p.sum > waited.Seconds() || p.sum < waited.Seconds()/2 {
		t.Errorf("the timed-out Acquire's duration is %vs, want about the %v the call took", p.sum, waited)
	}
	wantPoints(t, got, dotel.MetricAcquireAttempts, true, map[string]float64{
		acqAcquired: 1, tryBusy: 1, acqBusy: 1, tryAcquired: 4, acqClosed: 1})
	if p := got[dotel.MetricAcquireAttempts][tryAcquired]; p.sum != 4 {
		t.Errorf("attempts of 4 TryAcquires: %v", p.sum)
	}
	wantPoints(t, got, dotel.MetricLeaseCount, false, map[string]float64{"distlock.backend=mem": 0})
	wantPoints(t, got, dotel.MetricLeaseHeld, true, map[string]float64{
		"distlock.backend=mem,distlock.lease.end=released": 1,
		"distlock.backend=mem,distlock.lease.end=lost":     3,
		"distlock.backend=mem,distlock.lease.end=closed":   1,
	})
	if p := got[dotel.MetricLeaseHeld]["distlock.backend=mem,distlock.lease.end=released"]; p.sum < waited.Seconds() {
		t.Errorf("released lease held %vs, want at least the %v of the timed-out Acquire", p.sum, waited)
	}
	if p := got[dotel.MetricLeaseHeld]["distlock.backend=mem,distlock.lease.end=lost"]; p.sum <= 0 || p.sum > time.Since(start).Seconds() {
		t.Errorf("lost leases held %vs in all, want more than 0 and less than the scenario's %v", p.sum, time.Since(start))
	}
	wantPoints(t, got, dotel.MetricLeaseLost, false, map[string]float64{
		"distlock.backend=mem,distlock.cause=expired": 1,
		"distlock.backend=mem,distlock.cause=refused": 2,
	})
	wantPoints(t, got, dotel.MetricRefreshFailures, false, map[string]float64{
		"distlock.backend=mem,distlock.cause=refused,distlock.refresh.auto=false": 1,
		"distlock.backend=mem,distlock.cause=refused,distlock.refresh.auto=true":  1,
	})

	// Spans: every distlock span is a child of the caller's, in order.
	type want struct {
		name  string
		attrs string // besides backend and op
		err   bool
	}
	wants := []want{
		{dotel.SpanNameAcquire, fmt.Sprintf("distlock.attempts=1,distlock.outcome=acquired,distlock.token=%d", lease.Token()), false},
		{dotel.SpanNameTryAcquire, "distlock.attempts=1,distlock.outcome=busy", false},
		{dotel.SpanNameAcquire, "distlock.attempts=1,distlock.outcome=busy", false},
		{dotel.SpanNameRelease, fmt.Sprintf("distlock.token=%d", lease.Token()), false},
		{dotel.SpanNameTryAcquire, fmt.Sprintf("distlock.attempts=1,distlock.outcome=acquired,distlock.token=%d", lost.Token()), false},
		{dotel.SpanNameTryAcquire, fmt.Sprintf("distlock.attempts=1,distlock.outcome=acquired,distlock.token=%d", gone.Token()), false},
		{dotel.SpanNameTryAcquire, fmt.Sprintf("distlock.attempts=1,distlock.outcome=acquired,distlock.token=%d", auto.Token()), false},
		{dotel.SpanNameTryAcquire, "distlock.attempts=1,distlock.outcome=acquired,distlock.token=1", false},
		{dotel.SpanNameAcquire, "distlock.attempts=0,distlock.outcome=closed", true},
	}
	ended := h.spans.Ended()
	if len(ended) != len(wants)+1 {
		for _, s := range ended {
			t.Logf("span %s %v", s.Name(), s.Attributes())
		}
		t.Fatalf("%d spans ended, want %d", len(ended), len(wants)+1)
	}
	root := ended[len(ended)-1]
	if root.Name() != "caller" {
		t.Fatalf("last span ended is %q, want the caller's", root.Name())
	}
	for i, w := range wants {
		s := ended[i]
		if s.Name() != w.name {
			t.Errorf("span %d: %q, want %q", i, s.Name(), w.name)
			continue
		}
		if s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("span %d %s: parent %v, not the caller's span %v", i, s.Name(), s.Parent().SpanID(), root.SpanContext().SpanID())
		}
		if s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("span %d %s: kind %v", i, s.Name(), s.SpanKind())
		}
		set := attribute.NewSet(s.Attributes()...)
		if v, _ := set.Value(dotel.AttrBackend); v.AsString() != "mem" {
			t.Errorf("span %d %s: backend %q", i, s.Name(), v.AsString())
		}
		if _, ok := set.Value(dotel.AttrKey); ok {
			t.Errorf("span %d %s: has the key attribute without WithKeyAttribute", i, s.Name())
		}
		var rest []attribute.KeyValue
		for _, kv := range s.Attributes() {
			if kv.Key != dotel.AttrBackend && kv.Key != dotel.AttrOp {
				rest = append(rest, kv)
			}
		}
		rs := attribute.NewSet(rest...)
		if enc := rs.Encoded(attribute.DefaultEncoder()); enc != w.attrs {
			t.Errorf("span %d %s: attributes %s, want %s", i, s.Name(), enc, w.attrs)
		}
		if st := s.Status().Code; (st == codes.Error) != w.err || st == codes.Ok {
			t.Errorf("span %d %s: status %v %q, want error %v", i, s.Name(), st, s.Status().Description, w.err)
		}
		if w.err && (len(s.Events()) != 1 || s.Events()[0].Name != "exception") {
			t.Errorf("span %d %s: events %v, want the error recorded", i, s.Name(), s.Events())
		}
	}
}

// TestKeyAttribute: WithKeyAttribute(true) puts the key on every
// measurement and span.
func TestKeyAttribute(t *testing.T) {
	h := newHarness(t, dotel.WithKeyAttribute(true))
	ns := memory.NewNamespace()
	a := h.locker(t, ns)
	ctx := context.Background()
	for _, key := range []string{"k1", "k2"} {
		l, err := a.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := h.collect(t)
	for _, name := range []string{dotel.MetricAcquireDuration, dotel.MetricLeaseCount, dotel.MetricLeaseHeld} {
		for _, key := range []string{"k1", "k2"} {
			found := false
			for attrs := range got[name] {
				if strings.Contains(attrs, "distlock.key="+key) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no data point with key %s: %s", name, key, keys(got[name]))
			}
		}
	}
	wantPoints(t, got, dotel.MetricLeaseCount, false, map[string]float64{
		"distlock.backend=mem,distlock.key=k1": 0, "distlock.backend=mem,distlock.key=k2": 0})
	for _, s := range h.spans.Ended() {
		set := attribute.NewSet(s.Attributes()...)
		if v, ok := set.Value(dotel.AttrKey); !ok || (v.AsString() != "k1" && v.AsString() != "k2") {
			t.Errorf("span %s: key attribute %v %v", s.Name(), v.AsString(), ok)
		}
	}
}

// TestStartContext: the ctx a Start method returns is derived from the
// given one, carries the new span as a child of the caller's, and the End
// method ends that span even if another span was put in the ctx between.
func TestStartContext(t *testing.T) {
	h := newHarness(t)
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	ctx, caller := h.tp.Tracer("test").Start(ctx, "caller")
	defer caller.End()

	actx := h.obs.AcquireStart(ctx, distlock.AcquireEvent{Backend: "x", Key: "k", Op: "acquire"})
	if actx.Value(ctxKey{}) != "v" {
		t.Error("AcquireStart's ctx is not derived from the given one")
	}
	ours := trace.SpanFromContext(actx)
	if ours.SpanContext().SpanID() == caller.SpanContext().SpanID() {
		t.Fatal("AcquireStart's ctx carries no new span")
	}
	inner, other := h.tp.Tracer("test").Start(actx, "driver")
	h.obs.AcquireEnd(inner, distlock.AcquireResult{
		AcquireEvent: distlock.AcquireEvent{Backend: "x", Key: "k", Op: "acquire"}, Attempts: 1, Token: 7})
	if !other.IsRecording() {
		t.Error("AcquireEnd ended a span that is not its own")
	}
	other.End()
	if ours.IsRecording() {
		t.Error("AcquireEnd did not end its span")
	}

	rctx := h.obs.ReleaseStart(ctx, distlock.LeaseEvent{Backend: "x", Key: "k", Token: 7})
	if rctx.Value(ctxKey{}) != "v" {
		t.Error("ReleaseStart's ctx is not derived from the given one")
	}
	rs := trace.SpanFromContext(rctx)
	h.obs.ReleaseEnd(rctx, distlock.LeaseEvent{Backend: "x", Key: "k", Token: 7}, errors.New("boom"))
	if rs.IsRecording() {
		t.Error("ReleaseEnd did not end its span")
	}
	// End methods given a ctx without the Observer's span do nothing.
	h.obs.AcquireEnd(context.Background(), distlock.AcquireResult{Attempts: 1})
	h.obs.ReleaseEnd(context.Background(), distlock.LeaseEvent{}, nil)

	for _, s := range h.spans.Ended() {
		if s.Name() == dotel.SpanNameRelease {
			if s.Status().Code != codes.Error || s.Parent().SpanID() != caller.SpanContext().SpanID() {
				t.Errorf("release span: status %v parent %v", s.Status(), s.Parent().SpanID())
			}
		}
	}
}

// TestConcurrentLeasesCount: many goroutines acquiring and releasing leave
// distlock.lease.count at 0 and count every acquisition.
func TestConcurrentLeasesCount(t *testing.T) {
	h := newHarness(t)
	a := h.locker(t, memory.NewNamespace())
	const workers, rounds = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				l, err := a.Acquire(context.Background(), fmt.Sprintf("k%d", (w+i)%3))
				if err != nil {
					t.Error(err)
					return
				}
				_ = l.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	got := h.collect(t)
	wantPoints(t, got, dotel.MetricLeaseCount, false, map[string]float64{"distlock.backend=mem": 0})
	wantPoints(t, got, dotel.MetricAcquireDuration, true, map[string]float64{acqAcquired: workers * rounds})
	wantPoints(t, got, dotel.MetricLeaseHeld, true, map[string]float64{
		"distlock.backend=mem,distlock.lease.end=released": workers * rounds})
}

// TestDefaultProviders: without options the global (by default no-op)
// providers are used, and the Observer works.
func TestDefaultProviders(t *testing.T) {
	obs, err := dotel.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	l, err := distlock.Open(context.Background(), "mem://otel-default", distlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type failingProvider struct{ noop.MeterProvider }

func (failingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

// failingMeter fails its histograms, returning nil with the error.
type failingMeter struct{ noop.Meter }

func (failingMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return nil, errors.New("no histograms here")
}

// TestFailingMeter: NewObserver reports an instrument that could not be
// made, and the Observer it returns still works.
func TestFailingMeter(t *testing.T) {
	obs, err := dotel.NewObserver(dotel.WithMeterProvider(failingProvider{}))
	if err == nil || !strings.Contains(err.Error(), "no histograms here") {
		t.Fatalf("NewObserver with failing histograms: %v", err)
	}
	l := memory.MustNew(memory.NewNamespace(), memory.WithDefaults(distlock.WithObserver(obs)))
	defer l.Close()
	lease, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
