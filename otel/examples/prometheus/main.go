// Command prometheus serves distlock's OpenTelemetry metrics on /metrics in
// the Prometheus format, while a few workers contend for locks on the
// in-process backend (or the one -backend names: every distlock backend is
// registered):
//
//	go run ./examples/prometheus -addr :2112
//	curl -s localhost:2112/metrics | grep ^distlock_
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/etcd"
	_ "github.com/distlock/distlock/memcached"
	_ "github.com/distlock/distlock/memory"
	_ "github.com/distlock/distlock/mysql"
	dotel "github.com/distlock/distlock/otel"
	_ "github.com/distlock/distlock/postgres"
	_ "github.com/distlock/distlock/redis"
	_ "github.com/distlock/distlock/redlock"
	_ "github.com/distlock/distlock/zookeeper"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	addr := flag.String("addr", "localhost:2112", "address to serve /metrics on")
	url := flag.String("backend", "mem://", "distlock backend URL")
	workers := flag.Int("workers", 4, "workers contending for the locks")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	obs, err := dotel.NewObserver(dotel.WithMeterProvider(mp), dotel.WithKeyAttribute(true))
	if err != nil {
		log.Fatal(err)
	}
	locker, err := distlock.Open(ctx, *url, distlock.WithObserver(obs), distlock.WithTTL(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	for w := range *workers {
		go work(ctx, locker, w)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Printf("serving http://%s/metrics", *addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// work takes one of three locks in turn, waiting at most 200ms for it, and
// holds it for up to 100ms.
func work(ctx context.Context, locker *distlock.Locker, w int) {
	for i := 0; ctx.Err() == nil; i++ {
		actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		lease, err := locker.Acquire(actx, fmt.Sprintf("job-%d", (w+i)%3), distlock.WithOwner(fmt.Sprintf("worker-%d", w)))
		cancel()
		if err != nil {
			continue
		}
		time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
		_ = lease.Release(context.WithoutCancel(ctx))
	}
}
