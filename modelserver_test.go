package distlock_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// modelServer is the model checker's lock server: exactly the semantics the
// backend SPI asks of a server, with its own expiry on the process's
// monotonic clock (the clients' clock: no drift). Every acquisition carries
// a hold id chosen by the client; a lock is held by one owner through one or
// more holds (reentrancy) and freed when the last hold is released, or at
// its expiry. Fencing tokens come from a per-key counter that outlives the
// lock. An undo of a hold id that has not arrived yet is remembered, so the
// acquisition is refused when it lands: the driver's undo of an ambiguous
// attempt, in its simplest correct form.
type modelServer struct {
	mu     sync.Mutex
	keys   map[string]*modelKey
	fences map[string]uint64
	undone map[uint64]bool
	grants map[string]map[uint64]string // key → token → owner, every grant ever
	nextID atomic.Uint64
	sealed bool     // the run is over: no request may arrive any more
	late   []string // requests that arrived sealed
}

type modelKey struct {
	owner   string
	token   uint64
	expires time.Time
	holds   map[uint64]bool
}

func newModelServer() *modelServer {
	return &modelServer{
		keys:   map[string]*modelKey{},
		fences: map[string]uint64{},
		undone: map[uint64]bool{},
		grants: map[string]map[uint64]string{},
	}
}

// holdID returns a fresh hold id.
func (s *modelServer) holdID() uint64 { return s.nextID.Add(1) }

// live returns key's record if it is held at now. Callers hold s.mu.
func (s *modelServer) live(key string, now time.Time) *modelKey {
	k := s.keys[key]
	if k == nil {
		return nil
	}
	if !now.Before(k.expires) || len(k.holds) == 0 {
		delete(s.keys, key)
		return nil
	}
	return k
}

// arrive records a request's arrival; it reports false (and the request
// is dropped) once the server is sealed.
func (s *modelServer) arrive(what string) bool {
	if s.sealed {
		s.late = append(s.late, what)
		return false
	}
	return true
}

// modelGrant is the server's answer to an acquisition.
type modelGrant struct {
	token  uint64
	issued time.Time
	busy   time.Duration // > 0: held by another owner for that long
	ok     bool
}

func (s *modelServer) acquire(key, owner string, ttl time.Duration, hold uint64) modelGrant {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.arrive(fmt.Sprintf("acquire %s by %s", key, owner)) || s.undone[hold] {
		return modelGrant{busy: time.Millisecond}
	}
	now := time.Now()
	k := s.live(key, now)
	switch {
	case k == nil:
		s.fences[key]++
		k = &modelKey{owner: owner, token: s.fences[key], expires: now.Add(ttl), holds: map[uint64]bool{hold: true}}
		s.keys[key] = k
		if s.grants[key] == nil {
			s.grants[key] = map[uint64]string{}
		}
		s.grants[key][k.token] = owner
	case k.owner == owner:
		k.holds[hold] = true
		if exp := now.Add(ttl); exp.After(k.expires) {
			k.expires = exp
		}
	default:
		return modelGrant{busy: k.expires.Sub(now)}
	}
	return modelGrant{token: k.token, issued: now, ok: true}
}

func (s *modelServer) refresh(key, owner string, token uint64, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.arrive(fmt.Sprintf("refresh %s by %s", key, owner)) {
		return false
	}
	now := time.Now()
	k := s.live(key, now)
	if k == nil || k.owner != owner || k.token != token {
		return false
	}
	if exp := now.Add(ttl); exp.After(k.expires) {
		k.expires = exp
	}
	return true
}

func (s *modelServer) release(key, owner string, token, hold uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.arrive(fmt.Sprintf("release %s by %s", key, owner)) {
		return false
	}
	k := s.live(key, time.Now())
	if k == nil || k.owner != owner || k.token != token || !k.holds[hold] {
		return false
	}
	delete(k.holds, hold)
	if len(k.holds) == 0 {
		delete(s.keys, key)
	}
	return true
}

// undo removes hold if it arrived, and refuses it if it arrives later.
func (s *modelServer) undo(key string, hold uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.arrive(fmt.Sprintf("undo %s", key)) {
		return
	}
	s.undone[hold] = true
	if k := s.live(key, time.Now()); k != nil && k.holds[hold] {
		delete(k.holds, hold)
		if len(k.holds) == 0 {
			delete(s.keys, key)
		}
	}
}

// granted reports whether the server ever granted token on key to owner.
// Callers hold s.mu.
func (s *modelServer) granted(key string, token uint64, owner string) bool {
	return s.grants[key][token] == owner
}

// seal ends the run: it returns the holds still live whose ids are in
// orphan (acquisitions that failed for their caller), and makes every later
// request a violation.
func (s *modelServer) seal(orphan map[uint64]string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealed = true
	now := time.Now()
	var left []string
	for key := range s.keys {
		k := s.live(key, now)
		if k == nil {
			continue
		}
		for h := range k.holds {
			if what, ok := orphan[h]; ok {
				left = append(left, fmt.Sprintf("%s: hold of %s (%s) left for %v", key, k.owner, what, k.expires.Sub(now).Round(time.Millisecond)))
			}
		}
	}
	return left
}
