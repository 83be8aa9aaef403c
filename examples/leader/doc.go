// Command leader runs N replicas that elect one leader among them with
// distlock.Election, on any backend:
//
//	go run ./examples/leader                                    # mem://, in one process
//	go run ./examples/leader -backend redis://127.0.0.1:6379/0  # start it in several terminals
//
// Each replica leads for a while, checks Term.Err() before each action a
// leader alone may take, passes the term's fencing token along, and
// resigns; the others take over in turn. One replica also watches who
// leads (Election.Observe). The run is bounded by -duration.
package main
