package zk

import (
	"errors"
	"testing"
	"time"
)

// TestFlushRequestsNeverBlocks: a request can be answered with an error
// more than once — queueRequest's tie with Close, then sendData's write
// error, then the flush after the connection dropped — and its recvChan
// holds two. The connection's loop flushes the requests it still lists;
// a third send must not block that loop for ever (the loop then never
// ends, and its goroutine outlives Close).
func TestFlushRequestsNeverBlocks(t *testing.T) {
	answered := &request{xid: 1, recvChan: make(chan response, 2)}
	answered.recvChan <- response{-1, ErrConnectionClosed} // the tie with Close
	answered.recvChan <- response{-1, errors.New("write: broken pipe")}
	unsent := &request{xid: 2, recvChan: make(chan response, 1)}
	unsent.recvChan <- response{-1, ErrConnectionClosed}
	c := &Conn{requests: map[int32]*request{1: answered}, sendChan: make(chan *request, 1)}
	c.sendChan <- unsent
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.flushRequests(ErrClosing)
		c.flushUnsentRequests(ErrClosing)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("flushing a request already answered twice blocked the connection's loop")
	}
	if r := <-answered.recvChan; r.err != ErrConnectionClosed {
		t.Errorf("first answer %v, want the first error sent", r.err)
	}
}
