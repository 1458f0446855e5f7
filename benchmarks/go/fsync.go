// Go's peer of `blocking_io fsync` (docs/benchmarks.md, "fsync in Go"):
// N goroutines each write 4 KiB to a file of their own and fsync it, in a
// loop, for --seconds; the same with N locked OS threads
// (runtime.LockOSThread, so that each fsync blocks a thread of its own, as
// 100 pthreads do). Go's runtime hands a P blocked in a system call to
// another M (entersyscall, sysmon's retake), the model issue 28 names.
//
//	fsync_go [--writers 100] [--seconds 2]
//
// Prints one JSON object: {"goroutines_per_s": ..., "locked_threads_per_s":
// ..., "writers": ..., "procs": ...}.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Flushes per second of `writers` writers for `seconds`, each on a locked
// OS thread or not.
func rate(writers int, seconds int, locked bool) float64 {
	var done int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(time.Duration(seconds) * time.Second)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if locked {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			path := fmt.Sprintf("%s/weft-bench-fsync-go-%d-%d", os.TempDir(), os.Getpid(), i)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0600)
			if err != nil {
				fmt.Fprintln(os.Stderr, "fsync_go:", err)
				os.Exit(1)
			}
			defer os.Remove(path)
			defer f.Close()
			block := make([]byte, 4096)
			var mine int64
			for time.Now().Before(end) {
				if _, err := f.Write(block); err != nil {
					break
				}
				if err := f.Sync(); err != nil {
					break
				}
				mine++
			}
			atomic.AddInt64(&done, mine)
		}(i)
	}
	wg.Wait()
	return float64(done) / time.Since(start).Seconds()
}

func main() {
	writers := flag.Int("writers", 100, "goroutines (and locked threads)")
	seconds := flag.Int("seconds", 2, "how long each half runs")
	flag.Parse()
	if *writers < 1 || *writers > 10000 || *seconds < 1 || *seconds > 600 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "fsync_go: --writers needs 1 to 10000, --seconds 1 to 600")
		os.Exit(2)
	}
	goroutines := rate(*writers, *seconds, false)
	threads := rate(*writers, *seconds, true)
	fmt.Printf("{\"goroutines_per_s\": %.0f, \"locked_threads_per_s\": %.0f, \"writers\": %d, \"procs\": %d}\n",
		goroutines, threads, *writers, runtime.GOMAXPROCS(0))
}
