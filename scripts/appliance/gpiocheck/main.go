// Command gpiocheck is a test-only helper of `make appliance-test`,
// cross-compiled for arm64 and run in the emulated guest (QEMU virt, whose
// PL061 GPIO controller is at 0x09030000). It checks that linemq drives its
// status LED on a PL061 line:
//
//  1. through periph.io's gpioioctl driver (the one linemq uses) it finds
//     the PL061's GPIO character device and reads the line's info: the
//     line must be requested by linemq (consumer "linemq@PID");
//  2. it samples the line's level for a while from the kernel's GPIO
//     debugfs file (/sys/kernel/debug/gpio), which reads the PL061's data
//     register for each requested line: the character device cannot read
//     a line another process holds, and the kernel gives a line to one
//     requester only. A blinking LED shows as changes;
//  3. through periph.io it drives a spare line of the same chip high and
//     low and reads it back after each write.
//
// Its output is one line per finding, prefixed "gpiocheck:", and a last
// line "gpiocheck: PASS ..." or "gpiocheck: FAIL ...".
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/host/v3"
	"periph.io/x/host/v3/gpioioctl"
)

var (
	label     = flag.String("chip", "pl061", "a part of the GPIO chip's label")
	watch     = flag.Int("watch", 4, "the line linemq drives (its status LED)")
	watchFor  = flag.Duration("for", 3*time.Second, "how long to sample the watched line")
	spare     = flag.Int("roundtrip", 5, "a free line to drive and read back through periph.io (-1: none)")
	debugfs   = flag.String("debugfs", "/sys/kernel/debug/gpio", "the kernel's GPIO debugfs file")
	sampleGap = flag.Duration("every", 10*time.Millisecond, "sampling period")
	maxLit    = flag.Duration("max-lit", 250*time.Millisecond, "longest median lit span allowed: a heartbeat's flashes are 100 ms (a slow blink's 500 ms)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Println("gpiocheck: FAIL", err)
		os.Exit(1)
	}
}

func run() error {
	if _, err := host.Init(); err != nil {
		fmt.Println("gpiocheck: periph host drivers:", err)
	}
	var chip *gpioioctl.GPIOChip
	for _, c := range gpioioctl.Chips {
		fmt.Printf("gpiocheck: periph.io gpioioctl: %s (%s, %s), %d lines\n", c.Name(), c.Label(), c.Path(), c.LineCount())
		if strings.Contains(c.Label(), *label) {
			chip = c
		}
	}
	if chip == nil {
		return fmt.Errorf("no GPIO chip labelled *%s* among %d", *label, len(gpioioctl.Chips))
	}
	line := chip.ByNumber(*watch)
	if line == nil {
		return fmt.Errorf("%s has no line %d", chip.Name(), *watch)
	}
	consumer := line.Consumer()
	fmt.Printf("gpiocheck: %s line %d: consumer %q\n", chip.Name(), *watch, consumer)
	if !strings.HasPrefix(consumer, "linemq") {
		return fmt.Errorf("%s line %d is not held by linemq (consumer %q)", chip.Name(), *watch, consumer)
	}

	// Sample the level linemq drives.
	var hi, lo, changes, unknown int
	var last string
	var spans []time.Duration // lit spans, from rising to falling edge
	var rose time.Time
	start := time.Now()
	for time.Since(start) < *watchFor {
		v, err := level(chip.Label(), *watch)
		now := time.Now()
		switch {
		case err != nil:
			unknown++
			if unknown == 1 {
				fmt.Println("gpiocheck: debugfs:", err)
			}
		case v == "hi":
			hi++
		default:
			lo++
		}
		if err == nil {
			if last != "" && v != last {
				changes++
				if v == "hi" {
					rose = now
				} else if !rose.IsZero() {
					spans = append(spans, now.Sub(rose))
				}
			}
			last = v
		}
		time.Sleep(*sampleGap)
	}
	n := hi + lo
	var spanText []string
	for _, s := range spans[:min(len(spans), 8)] {
		spanText = append(spanText, fmt.Sprint(s.Round(10*time.Millisecond)))
	}
	fmt.Printf("gpiocheck: line %d sampled %d times in %.1f s from %s: hi %d, lo %d, %d changes; lit spans %s\n",
		*watch, n, time.Since(start).Seconds(), *debugfs, hi, lo, changes, strings.Join(spanText, " "))
	if n == 0 {
		return fmt.Errorf("line %d: no reading from %s", *watch, *debugfs)
	}
	if changes < 2 || hi == 0 || lo == 0 {
		return fmt.Errorf("line %d does not blink (hi %d, lo %d, %d changes)", *watch, hi, lo, changes)
	}
	// The median lit span, not the longest: under emulation the sampler
	// can stall for longer than a heartbeat's 150 ms gap and see two
	// flashes as one.
	if len(spans) > 0 {
		sorted := slices.Clone(spans)
		slices.Sort(sorted)
		if med := sorted[len(sorted)/2]; med > *maxLit {
			return fmt.Errorf("line %d lit for %v (median), longer than %v: not the heartbeat of a healthy broker", *watch, med, *maxLit)
		}
	}

	// A spare line, driven and read back through periph.io.
	rt := "no round trip"
	if *spare >= 0 {
		l := chip.ByNumber(*spare)
		if l == nil {
			return fmt.Errorf("%s has no line %d", chip.Name(), *spare)
		}
		if c := l.Consumer(); c != "" {
			return fmt.Errorf("spare line %d is held by %q", *spare, c)
		}
		var got []string
		for _, want := range []gpio.Level{gpio.High, gpio.Low, gpio.High, gpio.Low} {
			if err := l.Out(want); err != nil {
				return fmt.Errorf("line %d: Out(%v): %v", *spare, want, err)
			}
			dbg, _ := level(chip.Label(), *spare)
			// Read switches the line to an input; the PL061 keeps the data
			// register's bit, and nothing outside drives the line.
			r := l.Read()
			got = append(got, fmt.Sprintf("%v->%v(debugfs %s)", want, r, dbg))
			if r != want || dbg != map[gpio.Level]string{gpio.High: "hi", gpio.Low: "lo"}[want] {
				return fmt.Errorf("line %d: drove %v, read back %v, debugfs %q", *spare, want, r, dbg)
			}
		}
		l.Close()
		rt = fmt.Sprintf("line %d driven and read back through periph.io: %s", *spare, strings.Join(got, " "))
		fmt.Println("gpiocheck:", rt)
	}
	fmt.Printf("gpiocheck: PASS %s line %d held by %s blinks (%d changes in %v); %s\n",
		chip.Name(), *watch, consumer, changes, *watchFor, rt)
	return nil
}

var header = regexp.MustCompile(`^gpiochip\d+: GPIOs (\d+)-(\d+), .*`)

// level returns "hi" or "lo" for line off of the chip labelled chipLabel,
// as the kernel's GPIO debugfs file shows it: gpiolib prints a requested
// line's level from the chip driver's get(), for the PL061 a read of its
// data register. Lines nobody requested are not listed.
func level(chipLabel string, off int) (string, error) {
	f, err := os.Open(*debugfs)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	want := ""
	for sc.Scan() {
		t := sc.Text()
		if m := header.FindStringSubmatch(t); m != nil {
			want = ""
			if strings.Contains(t, chipLabel) {
				base, _ := strconv.Atoi(m[1])
				want = fmt.Sprintf("gpio-%d ", base+off)
			}
			continue
		}
		if want != "" && strings.HasPrefix(strings.TrimSpace(t)+" ", want) {
			switch {
			case strings.Contains(t, ") out hi") || strings.Contains(t, ") in  hi"):
				return "hi", nil
			case strings.Contains(t, ") out lo") || strings.Contains(t, ") in  lo"):
				return "lo", nil
			}
			return "", fmt.Errorf("cannot read %q", t)
		}
	}
	return "", fmt.Errorf("line %d of %s not in %s (not requested?)", off, chipLabel, *debugfs)
}
