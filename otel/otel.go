// Package otel turns distlock's Observer events into OpenTelemetry metrics
// and spans. It is a module of its own (github.com/distlock/distlock/otel),
// so that the distlock library itself never depends on OpenTelemetry. It is
// built on the OpenTelemetry API only: metrics and spans go wherever the
// MeterProvider and TracerProvider given to NewObserver (by default the
// global ones) send them.
//
//	obs, err := otel.NewObserver()
//	if err != nil { ... }
//	locker, err := distlock.Open(ctx, url, distlock.WithObserver(obs))
//
// # Metrics
//
// Every instrument carries distlock.backend (the Locker's backend name, such
// as "redis") and, only with WithKeyAttribute(true), distlock.key (the lock's
// name: one time series per key, so off by default).
//
//	distlock.acquire.duration    histogram, s         distlock.op, distlock.outcome
//	distlock.acquire.attempts    histogram, {attempt} distlock.op, distlock.outcome
//	distlock.lease.held.duration histogram, s         distlock.lease.end
//	distlock.lease.count         updowncounter, {lease}
//	distlock.lease.lost          counter, {lease}     distlock.cause
//	distlock.refresh.failures    counter, {refresh}   distlock.refresh.auto, distlock.cause
//
// distlock.acquire.duration is the time from the start of Acquire or
// TryAcquire to its outcome (distlock.AcquireResult.Waited), so it includes
// the time spent waiting for another owner to let go: the wait time of the
// acquisitions that got the lock is distlock.acquire.duration with
// distlock.op "acquire" and distlock.outcome "acquired", and that of the
// ones that gave up waiting is distlock.outcome "busy". There is no
// separate wait histogram, since it would record the same interval again.
// distlock.op is "acquire" or "try-acquire"; distlock.outcome is
// distlock.AcquireResult.Outcome: "acquired", "busy", "unavailable",
// "closed" or "error".
//
// distlock.acquire.attempts is the number of attempts one acquisition made
// (a backend's native wait counts as one): above 1 on polling backends under
// contention or after transient failures.
//
// distlock.lease.held.duration is recorded once per acquired lease, when it
// ends: the time from the acquire request to the end, with
// distlock.lease.end "released" (Release was called, whatever the backend
// answered), "lost" (expired, session lost, refresh refused) or "closed"
// (its Locker was closed while it was held).
//
// distlock.lease.count is the number of leases held through this Observer:
// +1 when an acquisition returns a lease, −1 when the lease ends (Release
// called, lost, or its Locker closed). Since distlock reports the end of
// every acquired lease exactly once, it returns to 0 when no lease is held.
// (A lease that is lost is reported just after its Done channel closes, on
// the goroutine that ended it, so code woken by Done may read the old
// count for a moment.)
//
// distlock.lease.lost counts leases that ended without Release other than
// by their Locker's Close, by distlock.cause = distlock.Cause: "expired",
// "session", "refused", "late" or "lost".
//
// distlock.refresh.failures counts failed refreshes of held leases,
// automatic (distlock.refresh.auto true) or by Lease.Refresh (false), by
// distlock.cause: "refused" (the backend no longer holds the lock for this
// owner: the lease is lost, and also counted in distlock.lease.lost),
// "unavailable" (a transient failure: an automatic refresh is retried
// before the lease's deadline), "timeout" or "canceled" (the refresh's
// context ended first), "closed" (the Locker is closing) or "error".
//
// # Spans
//
// Each Acquire and TryAcquire is one span, "distlock.Acquire" or
// "distlock.TryAcquire", a child of the span in the caller's context, and
// each Release of a held lease is one span, "distlock.Release". The context
// the backend's client is called with carries that span, so spans of an
// instrumented client (such as go-redis's) nest under it. Span attributes:
// distlock.backend, distlock.op, distlock.key (only with
// WithKeyAttribute(true)), and on acquisitions distlock.attempts,
// distlock.outcome and, when acquired on a backend with fencing,
// distlock.token; on releases distlock.token. An acquisition span's status
// is Error, with the error recorded as an event, for the outcomes
// "unavailable", "closed" and "error"; "busy" (TryAcquire refused, or
// Acquire's context ended while the lock was held by another owner) is the
// lock doing its job and leaves the status unset. A release span's status
// is Error when the backend's answer is an error. Refreshes and losses carry
// no caller's context (automatic refreshes and expiries happen on the
// refresh scheduler) and are recorded as metrics only.
//
// # Cost
//
// Without the key attribute, the attribute sets are built once per backend,
// operation and outcome and kept: BenchmarkCycle (an uncontended
// TryAcquire+Release on mem://, `go test -run '^$' -bench Cycle -benchmem`)
// makes 8 allocations per cycle without an Observer, 13 with one on the
// no-op providers and 25 with one on the SDK's (every span sampled).
package otel

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/distlock/distlock"
	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the Meter and Tracer that an
// Observer uses.
const ScopeName = "github.com/distlock/distlock/otel"

// Instrument and span names.
const (
	MetricAcquireDuration  = "distlock.acquire.duration"
	MetricAcquireAttempts  = "distlock.acquire.attempts"
	MetricLeaseHeld        = "distlock.lease.held.duration"
	MetricLeaseCount       = "distlock.lease.count"
	MetricLeaseLost        = "distlock.lease.lost"
	MetricRefreshFailures  = "distlock.refresh.failures"
	SpanNameAcquire        = "distlock.Acquire"
	SpanNameTryAcquire     = "distlock.TryAcquire"
	SpanNameRelease        = "distlock.Release"
	spanNamePrefixOtherOps = "distlock."
)

// Attribute keys.
const (
	AttrBackend     = attribute.Key("distlock.backend")
	AttrKey         = attribute.Key("distlock.key")
	AttrOp          = attribute.Key("distlock.op")
	AttrOutcome     = attribute.Key("distlock.outcome")
	AttrCause       = attribute.Key("distlock.cause")
	AttrLeaseEnd    = attribute.Key("distlock.lease.end")
	AttrRefreshAuto = attribute.Key("distlock.refresh.auto")
	AttrAttempts    = attribute.Key("distlock.attempts")
	AttrToken       = attribute.Key("distlock.token")
)

// Bucket boundaries, in seconds: acquisitions take milliseconds to a few
// seconds of waiting; leases are held from milliseconds to an hour.
var (
	acquireBuckets  = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	heldBuckets     = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}
	attemptsBuckets = []float64{1, 2, 3, 5, 10, 20, 50, 100}
)

// Option configures NewObserver.
type Option func(*config)

type config struct {
	mp      metric.MeterProvider
	tp      trace.TracerProvider
	withKey bool
}

// WithMeterProvider sets the MeterProvider the metrics are recorded with
// (default: otel.GetMeterProvider() when NewObserver is called; before any
// otel.SetMeterProvider that is the global delegate, which forwards to the
// provider set first). nil keeps the default.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// WithTracerProvider sets the TracerProvider the spans are started with
// (default: otel.GetTracerProvider() when NewObserver is called, like
// WithMeterProvider's). nil keeps the default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithKeyAttribute adds the lock's name as attribute distlock.key to every
// metric and span (default false). Every distinct key then makes time
// series of its own: turn it on only for a small, fixed set of lock names,
// and not when names carry what must not reach the telemetry backend.
func WithKeyAttribute(on bool) Option {
	return func(c *config) { c.withKey = on }
}

// Observer is a distlock.Observer that records OpenTelemetry metrics and
// spans (see the package documentation for what it records). Its methods
// are safe for concurrent use, do not block (they only call the
// OpenTelemetry API, whose SDK exports in the background) and never call
// back into distlock. One Observer may serve any number of Lockers and
// backends.
type Observer struct {
	tracer  trace.Tracer
	withKey bool

	mu   sync.RWMutex
	sets map[setKey]*set // without withKey only

	acquireDuration metric.Float64Histogram
	acquireAttempts metric.Int64Histogram
	heldDuration    metric.Float64Histogram
	leaseCount      metric.Int64UpDownCounter
	leaseLost       metric.Int64Counter
	refreshFailures metric.Int64Counter
}

var _ distlock.Observer = (*Observer)(nil)

// NewObserver returns an Observer recording to the providers that opts set.
// Its error comes from creating an instrument, which the OpenTelemetry SDK
// does not fail for these names; even then the Observer returned is usable,
// with the failed instruments recording nothing.
func NewObserver(opts ...Option) (*Observer, error) {
	c := config{mp: gotel.GetMeterProvider(), tp: gotel.GetTracerProvider()}
	for _, o := range opts {
		o(&c)
	}
	m := c.mp.Meter(ScopeName)
	o := &Observer{tracer: c.tp.Tracer(ScopeName), withKey: c.withKey, sets: map[setKey]*set{}}
	var errs []error
	// A MeterProvider that fails an instrument may return nil with the
	// error: that instrument is then a no-op one.
	check := func(err error) { errs = append(errs, err) }
	var err error
	if o.acquireDuration, err = m.Float64Histogram(MetricAcquireDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of Acquire and TryAcquire calls, from the call to the outcome, including the time waiting for the lock."),
		metric.WithExplicitBucketBoundaries(acquireBuckets...)); o.acquireDuration == nil {
		o.acquireDuration = noop.Float64Histogram{}
	}
	check(err)
	if o.acquireAttempts, err = m.Int64Histogram(MetricAcquireAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts made by one Acquire or TryAcquire call."),
		metric.WithExplicitBucketBoundaries(attemptsBuckets...)); o.acquireAttempts == nil {
		o.acquireAttempts = noop.Int64Histogram{}
	}
	check(err)
	if o.heldDuration, err = m.Float64Histogram(MetricLeaseHeld, metric.WithUnit("s"),
		metric.WithDescription("How long acquired leases were held, recorded when they end: released, lost or closed."),
		metric.WithExplicitBucketBoundaries(heldBuckets...)); o.heldDuration == nil {
		o.heldDuration = noop.Float64Histogram{}
	}
	check(err)
	if o.leaseCount, err = m.Int64UpDownCounter(MetricLeaseCount, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases currently held.")); o.leaseCount == nil {
		o.leaseCount = noop.Int64UpDownCounter{}
	}
	check(err)
	if o.leaseLost, err = m.Int64Counter(MetricLeaseLost, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases that ended without Release (expired, session lost, refresh refused), not counting those ended by closing their Locker.")); o.leaseLost == nil {
		o.leaseLost = noop.Int64Counter{}
	}
	check(err)
	if o.refreshFailures, err = m.Int64Counter(MetricRefreshFailures, metric.WithUnit("{refresh}"),
		metric.WithDescription("Failed refreshes of held leases, automatic or by Lease.Refresh.")); o.refreshFailures == nil {
		o.refreshFailures = noop.Int64Counter{}
	}
	check(err)
	return o, errors.Join(errs...)
}

// set is one attribute set, as the options that pass it to the
// instruments and to Tracer.Start, built once: without the key attribute,
// there are only a few sets (backend × op × outcome, end or cause), so the
// Observer keeps them and a measurement allocates nothing for its
// attributes.
type set struct {
	rec   []metric.RecordOption
	add   []metric.AddOption
	start []trace.SpanStartOption
}

// setKey names a set: backend, key ("" without WithKeyAttribute) and up to
// two more attributes.
type setKey struct {
	backend, key string
	extra        [2]attribute.KeyValue
}

// maxSets bounds the Observer's cache of sets (backend names and causes
// are few; this is a guard against a backend naming itself anew each time).
const maxSets = 1024

// set returns the set of backend, key (with WithKeyAttribute) and extra
// (at most two).
func (o *Observer) set(backend, key string, extra ...attribute.KeyValue) *set {
	k := setKey{backend: backend}
	if o.withKey {
		k.key = key
	} else {
		copy(k.extra[:], extra)
		o.mu.RLock()
		s := o.sets[k]
		o.mu.RUnlock()
		if s != nil {
			return s
		}
	}
	kv := make([]attribute.KeyValue, 0, 2+len(extra))
	kv = append(kv, AttrBackend.String(backend))
	if o.withKey {
		kv = append(kv, AttrKey.String(key))
	}
	kv = append(kv, extra...)
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	s := &set{rec: []metric.RecordOption{opt}, add: []metric.AddOption{opt},
		start: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(kv...)}}
	if !o.withKey {
		o.mu.Lock()
		if len(o.sets) < maxSets {
			o.sets[k] = s
		}
		o.mu.Unlock()
	}
	return s
}

// spanKey keys the Observer's own span in the ctx that a Start method
// returns, so that the End method ends that span and no other, even if
// something between them put another span in the ctx.
type spanKey struct{ o *Observer }

func (o *Observer) start(ctx context.Context, name string, s *set) (context.Context, trace.Span) {
	ctx, span := o.tracer.Start(ctx, name, s.start...)
	return context.WithValue(ctx, spanKey{o}, span), span
}

func (o *Observer) span(ctx context.Context) trace.Span {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(spanKey{o}).(trace.Span)
	return s
}

func spanName(op string) string {
	switch op {
	case "acquire":
		return SpanNameAcquire
	case "try-acquire":
		return SpanNameTryAcquire
	}
	return spanNamePrefixOtherOps + op
}

func token(t uint64) attribute.KeyValue {
	if t > math.MaxInt64 {
		return AttrToken.String(strconv.FormatUint(t, 10))
	}
	return AttrToken.Int64(int64(t))
}

// AcquireStart implements distlock.Observer: it starts the acquisition's
// span, a child of ctx's, and returns ctx with that span.
func (o *Observer) AcquireStart(ctx context.Context, e distlock.AcquireEvent) context.Context {
	ctx, _ = o.start(ctx, spanName(e.Op), o.set(e.Backend, e.Key, AttrOp.String(e.Op)))
	return ctx
}

// AcquireEnd implements distlock.Observer: it records the acquisition's
// duration and attempts, counts an acquired lease as held, and ends the
// span that AcquireStart started.
func (o *Observer) AcquireEnd(ctx context.Context, r distlock.AcquireResult) {
	outcome := r.Outcome()
	s := o.set(r.Backend, r.Key, AttrOp.String(r.Op), AttrOutcome.String(outcome))
	o.acquireDuration.Record(ctx, r.Waited.Seconds(), s.rec...)
	o.acquireAttempts.Record(ctx, int64(r.Attempts), s.rec...)
	if r.Err == nil {
		o.leaseCount.Add(ctx, 1, o.set(r.Backend, r.Key).add...)
	}
	span := o.span(ctx)
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(AttrAttempts.Int(r.Attempts), AttrOutcome.String(outcome))
		if r.Err == nil && r.Token != 0 {
			span.SetAttributes(token(r.Token))
		}
		switch outcome {
		case "acquired", "busy":
		default:
			span.RecordError(r.Err)
			span.SetStatus(codes.Error, r.Err.Error())
		}
	}
	span.End()
}

// Refreshed implements distlock.Observer: a failed refresh is counted in
// distlock.refresh.failures.
func (o *Observer) Refreshed(e distlock.LeaseEvent, _ time.Duration, auto bool, err error) {
	if err == nil {
		return
	}
	s := o.set(e.Backend, e.Key, AttrRefreshAuto.Bool(auto), AttrCause.String(refreshCause(err)))
	o.refreshFailures.Add(context.Background(), 1, s.add...)
}

// refreshCause classifies a failed refresh for distlock.cause.
func refreshCause(err error) string {
	switch {
	case errors.Is(err, distlock.ErrClosed):
		return "closed"
	case errors.Is(err, distlock.ErrNotHeld):
		return "refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, distlock.ErrUnavailable):
		return "unavailable"
	}
	return "error"
}

// LeaseEnded implements distlock.Observer: the lease is no longer counted
// as held, its held duration is recorded, and unless its Locker was closed
// it is counted in distlock.lease.lost.
func (o *Observer) LeaseEnded(e distlock.LeaseEvent, cause error) {
	ctx := context.Background()
	o.leaseCount.Add(ctx, -1, o.set(e.Backend, e.Key).add...)
	c := distlock.Cause(cause)
	end := "lost"
	if c == "closed" {
		end = "closed"
	}
	o.heldDuration.Record(ctx, e.Held.Seconds(), o.set(e.Backend, e.Key, AttrLeaseEnd.String(end)).rec...)
	if end == "lost" {
		o.leaseLost.Add(ctx, 1, o.set(e.Backend, e.Key, AttrCause.String(c)).add...)
	}
}

// ReleaseStart implements distlock.Observer: the lease is no longer counted
// as held (it has ended locally, whatever the backend answers), its held
// duration is recorded, and the release's span is started as a child of
// ctx's; the ctx returned carries it.
func (o *Observer) ReleaseStart(ctx context.Context, e distlock.LeaseEvent) context.Context {
	o.leaseCount.Add(ctx, -1, o.set(e.Backend, e.Key).add...)
	o.heldDuration.Record(ctx, e.Held.Seconds(), o.set(e.Backend, e.Key, AttrLeaseEnd.String("released")).rec...)
	ctx, span := o.start(ctx, SpanNameRelease, o.set(e.Backend, e.Key, AttrOp.String("release")))
	if e.Token != 0 && span.IsRecording() {
		span.SetAttributes(token(e.Token))
	}
	return ctx
}

// ReleaseEnd implements distlock.Observer: it ends the release's span, with
// status Error if the backend's answer is an error.
func (o *Observer) ReleaseEnd(ctx context.Context, _ distlock.LeaseEvent, err error) {
	span := o.span(ctx)
	if span == nil {
		return
	}
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
