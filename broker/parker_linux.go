package broker

import (
	"os"
	"sync"
	"syscall"
	"time"
)

// parker watches the sockets of parked connections with an epoll set of
// its own. The set's descriptor is itself registered with Go's network
// poller (an epoll set is readable while it has events), so the parker
// waits like any network read: no thread sits blocked in epoll_wait, and a
// parked client's first packet wakes it as promptly as a packet on an
// active connection wakes that connection's reader. Waiting in a blocking
// epoll_wait instead cost a wake ten times slower than an active read
// (the returning thread had to win a P back from the scheduler).
type parker struct {
	srv  *Server
	epfd int
	ep   *os.File // epfd, as the runtime polls it

	mu     sync.Mutex
	parked map[int]*conn // by descriptor
	closed bool
	done   chan struct{}
}

// parkerTick bounds how late the parker notices a parked connection's keep
// alive running out, and its own shutdown.
const parkerTick = 250 * time.Millisecond

func newParker(srv *Server) (*parker, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// Non-blocking, so that os.NewFile hands it to the runtime's poller.
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	p := &parker{srv: srv, epfd: fd, ep: os.NewFile(uintptr(fd), "linemq-parker"), parked: make(map[int]*conn), done: make(chan struct{})}
	go p.loop()
	return p, nil
}

// park hands c's socket to the parker; it reports false (and the caller
// keeps reading) when the connection is closing or has no descriptor.
func (p *parker) park(c *conn) bool {
	if p == nil {
		return false
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		c.noPark = true
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		c.noPark = true
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Checked under p.mu: a writer that closes the socket unparks under
	// p.mu after setting closing, so it either finds the connection parked
	// or the connection sees it closing here.
	if p.closed || c.isClosing() {
		return false
	}
	parked := false
	// Inside Control the descriptor cannot be closed under us.
	raw.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollOneShot, Fd: int32(fd)}
		if syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) == nil {
			p.parked[int(fd)] = c
			c.parkFD = int(fd)
			parked = true
		}
	})
	if parked {
		// An idle connection keeps no buffers.
		if len(c.rbuf) == 0 {
			c.rbuf = nil
		}
		c.rxc = nil
		c.wmu.Lock()
		if !c.writing {
			c.spare = nil
		}
		c.wmu.Unlock()
	}
	return parked
}

// epollOneShot is EPOLLONESHOT, which package syscall lacks as a typed
// constant: an event disarms the descriptor until it is re-added.
const epollOneShot = 1 << 30

// unpark takes c out of the epoll set, if it is there, and restarts its
// reader; called before its socket is closed.
func (p *parker) unpark(c *conn) {
	if p == nil {
		return
	}
	p.mu.Lock()
	fd := c.parkFD
	woken := fd >= 0 && p.parked[fd] == c
	if woken {
		p.wakeLocked(fd, c)
	}
	p.mu.Unlock()
	if woken {
		go c.resume()
	}
}

func (p *parker) wakeLocked(fd int, c *conn) {
	syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	delete(p.parked, fd)
	c.parkFD = -1
}

func (p *parker) loop() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 128)
	var woken []*conn
	var lastScan time.Time
	raw, rerr := p.ep.SyscallConn()
	for {
		var n int
		var err error
		if rerr == nil {
			// Wait until the set has events or the tick passes (the
			// deadline), polling the set without blocking.
			p.ep.SetReadDeadline(time.Now().Add(parkerTick))
			werr := raw.Read(func(fd uintptr) bool {
				n, err = syscall.EpollWait(int(fd), events, 0)
				return n > 0 || (err != nil && err != syscall.EINTR)
			})
			if werr != nil && !os.IsTimeout(werr) && err == nil {
				err = werr
			}
		} else {
			// The runtime would not poll the set: wait in the kernel.
			n, err = syscall.EpollWait(p.epfd, events, int(parkerTick/time.Millisecond))
		}
		if err != nil && err != syscall.EINTR {
			p.srv.log.Error("parker: waiting for parked connections failed; they are woken", "err", err)
		}
		p.mu.Lock()
		for i := 0; i < n; i++ {
			fd := int(events[i].Fd)
			if c := p.parked[fd]; c != nil {
				p.wakeLocked(fd, c)
				woken = append(woken, c)
			}
		}
		// Parked clients whose keep alive ran out are woken to be
		// disconnected; on shutdown or an epoll failure, all are. The
		// scan visits every parked connection, so it runs once a tick,
		// not on every wake: a client's first packet after a pause must
		// not wait for a walk over thousands of idle ones.
		now := time.Now()
		failed := err != nil && err != syscall.EINTR
		if p.closed || failed || now.Sub(lastScan) >= parkerTick {
			lastScan = now
			for fd, c := range p.parked {
				if p.closed || failed || (!c.kaDeadline.IsZero() && !now.Before(c.kaDeadline)) {
					p.wakeLocked(fd, c)
					woken = append(woken, c)
				}
			}
		}
		closed := p.closed
		p.mu.Unlock()
		for _, c := range woken {
			go c.resume()
		}
		clear(woken)
		woken = woken[:0]
		if closed {
			p.ep.Close()
			return
		}
	}
}

// count returns the number of parked connections.
func (p *parker) count() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// close stops the parker after waking every parked connection.
func (p *parker) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ep.SetReadDeadline(time.Now()) // wake the loop now rather than at the tick
	<-p.done
}
