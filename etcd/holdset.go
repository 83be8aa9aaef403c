package etcd

import (
	"encoding/binary"
	"iter"
)

// holdSet is the driver's live holds by attempt id, for the hold watch to
// find the hold whose key a deletion names. It is keyed by the id's first
// 64 bits (a map slot of 16 bytes where the whole id takes 24): a live
// hold whose id shares them with another's (about one chance in 2^64 per
// pair) is kept in more, by its whole id.
type holdSet struct {
	by   map[uint64]*hold
	more map[waiterID]*hold
}

func (id waiterID) short() uint64 { return binary.LittleEndian.Uint64(id[:8]) }

func (s *holdSet) add(h *hold) {
	if s.by == nil {
		s.by = map[uint64]*hold{}
	}
	k := h.id.short()
	if o := s.by[k]; o != nil && o != h {
		if s.more == nil {
			s.more = map[waiterID]*hold{}
		}
		s.more[h.id] = h
		return
	}
	s.by[k] = h
}

// get returns the live hold with id id, nil if there is none.
func (s *holdSet) get(id waiterID) *hold {
	if h := s.by[id.short()]; h != nil && h.id == id {
		return h
	}
	return s.more[id]
}

// has reports whether h is live.
func (s *holdSet) has(h *hold) bool { return s.get(h.id) == h }

// remove removes h; false if it was not there.
func (s *holdSet) remove(h *hold) bool {
	if k := h.id.short(); s.by[k] == h {
		delete(s.by, k)
		return true
	}
	if s.more[h.id] == h {
		delete(s.more, h.id)
		return true
	}
	return false
}

func (s *holdSet) len() int { return len(s.by) + len(s.more) }

// all yields the live holds; the caller may remove the one yielded.
func (s *holdSet) all() iter.Seq[*hold] {
	return func(yield func(*hold) bool) {
		for _, h := range s.by {
			if !yield(h) {
				return
			}
		}
		for _, h := range s.more {
			if !yield(h) {
				return
			}
		}
	}
}
