package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/etcd"
	_ "github.com/distlock/distlock/memcached"
	_ "github.com/distlock/distlock/memory"
	_ "github.com/distlock/distlock/mysql"
	_ "github.com/distlock/distlock/postgres"
	_ "github.com/distlock/distlock/redis"
	_ "github.com/distlock/distlock/redlock"
	_ "github.com/distlock/distlock/zookeeper"
)

func main() {
	backend := flag.String("backend", "mem://", "lock backend URL")
	replicas := flag.Int("replicas", 3, "replicas in this process")
	duration := flag.Duration("duration", 5*time.Second, "how long to run")
	key := flag.String("key", "examples/leader", "the election's key")
	flag.Parse()
	if *replicas < 1 || *replicas > 100 || *duration <= 0 {
		log.Fatal("leader: -replicas must be 1 to 100 and -duration positive")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	host, _ := os.Hostname()

	var wg sync.WaitGroup
	for r := range *replicas {
		// Each replica has its own Locker: its own session, as a separate
		// process would.
		locker, err := distlock.Open(ctx, *backend)
		if err != nil {
			log.Fatal(err)
		}
		defer locker.Close()
		id := fmt.Sprintf("%s pid=%d replica=%d", host, os.Getpid(), r)
		e, err := distlock.NewElection(locker, *key, id,
			distlock.WithTermOptions(distlock.WithTTL(3*time.Second)),
			distlock.WithRecampaignBackoff(distlock.Backoff{Min: 50 * time.Millisecond, Max: 500 * time.Millisecond}))
		if err != nil {
			log.Fatal(err)
		}
		if r == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for info := range e.Observe(ctx) {
					if info.Held {
						fmt.Printf("observer: %q leads (term token %d)\n", info.Metadata, info.Token)
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := e.Lead(ctx, func(ctx context.Context, term *distlock.Term) error {
					fmt.Printf("replica %d leads, term token %d\n", r, term.Token())
					for range 3 + rand.IntN(5) {
						if err := term.Err(); err != nil { // right before a leader-only action
							fmt.Printf("replica %d lost leadership: %v\n", r, err)
							return nil
						}
						// The leader-only action: pass term.Token() to what it writes
						// (package fence), so a deposed leader is refused.
						select {
						case <-ctx.Done():
							return nil
						case <-time.After(100 * time.Millisecond):
						}
					}
					fmt.Printf("replica %d resigns\n", r)
					return nil // resign; Lead returns and this replica campaigns again
				})
				if err != nil && ctx.Err() == nil {
					log.Printf("replica %d: %v", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
