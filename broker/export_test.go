package broker

import "time"

// StallNow makes the stall watch (stall.go) find the process stopped for
// two seconds, as a SIGSTOP would: a test cannot stop its own process.
func (srv *Server) StallNow() { srv.stall.last.Add(-int64(2 * time.Second)) }
