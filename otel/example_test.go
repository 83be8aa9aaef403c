package otel_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/memory"
	dotel "github.com/distlock/distlock/otel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Export distlock's metrics to Prometheus: the OpenTelemetry Prometheus
// exporter is a metric reader that a MeterProvider feeds, and a Prometheus
// registry that an HTTP handler serves on /metrics.
func Example_prometheus() {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	obs, err := dotel.NewObserver(dotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	locker, err := distlock.Open(ctx, "mem://prometheus-example", distlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.TryAcquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.TryAcquire(ctx, "nightly-report", distlock.WithOwner("someone-else"))
	fmt.Println("second TryAcquire:", distlock.AcquireResult{Err: err}.Outcome())
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}

	// In a program: http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})).
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "distlock_acquire_duration_seconds_count") ||
			strings.HasPrefix(line, "distlock_lease_count") ||
			strings.HasPrefix(line, "distlock_lease_held_duration_seconds_count") {
			fmt.Println(line)
		}
	}
	// Output:
	// second TryAcquire: busy
	// distlock_acquire_duration_seconds_count{distlock_backend="mem",distlock_op="try-acquire",distlock_outcome="acquired"} 1
	// distlock_acquire_duration_seconds_count{distlock_backend="mem",distlock_op="try-acquire",distlock_outcome="busy"} 1
	// distlock_lease_count{distlock_backend="mem"} 0
	// distlock_lease_held_duration_seconds_count{distlock_backend="mem",distlock_lease_end="released"} 1
}
