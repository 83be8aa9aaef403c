package otel_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	dotel "github.com/distlock/distlock/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// BenchmarkCycle is one uncontended TryAcquire+Release on mem:// without
// an observer, with an Observer on the no-op providers, and with one on
// the SDK's (every span sampled, metrics aggregated, nothing exported).
func BenchmarkCycle(b *testing.B) {
	noops, err := dotel.NewObserver(dotel.WithMeterProvider(metricnoop.NewMeterProvider()),
		dotel.WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		b.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider()
	defer mp.Shutdown(context.Background())
	defer tp.Shutdown(context.Background())
	sdk, err := dotel.NewObserver(dotel.WithMeterProvider(mp), dotel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		opts []distlock.Option
	}{
		{"none", nil},
		{"otel-noop", []distlock.Option{distlock.WithObserver(noops)}},
		{"otel-sdk", []distlock.Option{distlock.WithObserver(sdk)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := memory.MustNew(memory.NewNamespace(), memory.WithDefaults(bc.opts...))
			defer l.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				lease, err := l.TryAcquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
