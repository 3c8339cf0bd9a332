package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat. The kernel
// exports them in USER_HZ, which is 100 on every architecture Go targets on
// Linux; reading sysconf(_SC_CLK_TCK) would need cgo for the same answer.
const userHZ = 100

// procSample is one reading of a process's CPU time and memory.
type procSample struct {
	cpu    time.Duration // user + system, all threads
	rssKiB int64         // VmRSS: resident now
	hwmKiB int64         // VmHWM: the kernel's record of peak RSS since start
}

// readProc reads /proc/<pid>/stat and /proc/<pid>/status.
func readProc(pid int) (procSample, error) {
	var s procSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("bench: broker pid %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may contain spaces
	// and parentheses, so fields are counted from the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, fmt.Errorf("bench: /proc/%d/stat: unexpected format", pid)
	}
	f := bytes.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return s, fmt.Errorf("bench: /proc/%d/stat: unexpected format", pid)
	}
	utime, err1 := strconv.ParseInt(string(f[14-3]), 10, 64)
	stime, err2 := strconv.ParseInt(string(f[15-3]), 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("bench: /proc/%d/stat: unexpected format", pid)
	}
	s.cpu = time.Duration(utime+stime) * time.Second / userHZ

	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("bench: broker pid %d: %w", pid, err)
	}
	for line := range bytes.Lines(status) {
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			s.rssKiB = kib(line)
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			s.hwmKiB = kib(line)
		}
	}
	return s, nil
}

// kib parses the number of a "VmRSS:    1234 kB" line.
func kib(line []byte) int64 {
	f := bytes.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return n
}

// sampler reads a process's /proc entries every interval, keeping the first
// and last readings and the largest RSS seen. Sampling (rather than reading
// only VmHWM at the end) gives the peak during this run, not the peak since
// the broker started.
type sampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	first   procSample
	last    procSample
	peakKiB int64
	err     error // the process went away mid-run
}

func startSampler(pid int, every time.Duration) (*sampler, error) {
	first, err := readProc(pid)
	if err != nil {
		return nil, err
	}
	s := &sampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{}),
		first: first, last: first, peakKiB: first.rssKiB}
	go s.loop(every)
	return s, nil
}

func (s *sampler) loop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.sample()
			return
		case <-t.C:
			if !s.sample() {
				return
			}
		}
	}
}

func (s *sampler) sample() bool {
	p, err := readProc(s.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return false
	}
	s.last = p
	s.peakKiB = max(s.peakKiB, p.rssKiB)
	return true
}

// current returns the latest reading, taking a fresh one first.
func (s *sampler) current() procSample {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// finish stops sampling and returns the first and last readings, the peak
// RSS, and an error if the process could not be read at some point.
func (s *sampler) finish() (first, last procSample, peakKiB int64, err error) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.last, s.peakKiB, s.err
}

// selfCPU returns this process's user + system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
