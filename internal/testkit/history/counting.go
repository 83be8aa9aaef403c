package history

import "sort"

// CheckCounting returns every violation of a counting semaphore of permits
// permits per key in the holds: "permits" when a hold starts while permits
// others of its key are active (each acquisition is a distinct holder), and
// "fencing" as Check reports it (tokens, where not 0, strictly increasing
// in real-time order over every permit of the key).
func CheckCounting(holds []Hold, permits int) []Violation {
	var v []Violation
	byKey := map[string][]Hold{}
	for _, h := range holds {
		byKey[h.Key] = append(byKey[h.Key], h)
	}
	for _, hs := range byKey {
		sort.Slice(hs, func(i, j int) bool { return hs[i].Start < hs[j].Start })
		sweep(hs, func(active []Hold, h Hold) {
			if len(active) >= permits {
				v = append(v, Violation{"permits", active[0], h})
			}
		})
		fresh := make([]bool, len(hs))
		for i := range fresh {
			fresh[i] = true
		}
		v = append(v, checkFencing(hs, fresh)...)
	}
	return v
}

// MaxActive returns the most holds of one key active at one instant: how
// much contention a history shows.
func MaxActive(holds []Hold) int {
	type edge struct {
		at    int64
		delta int
	}
	byKey := map[string][]edge{}
	for _, h := range holds {
		byKey[h.Key] = append(byKey[h.Key], edge{h.Start, 1}, edge{h.End, -1})
	}
	most := 0
	for _, es := range byKey {
		sort.Slice(es, func(i, j int) bool {
			if es[i].at != es[j].at {
				return es[i].at < es[j].at
			}
			return es[i].delta < es[j].delta // an end before a start at one instant
		})
		n := 0
		for _, e := range es {
			n += e.delta
			most = max(most, n)
		}
	}
	return most
}
