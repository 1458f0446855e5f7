// Spawn cost, Go's peer of benchmarks/spawn.cpp (scripts/bench-peers): start
// N goroutines that do nothing, then wait for all of them (a WaitGroup, Go's
// way of joining).
//
//	GOMAXPROCS=1 spawn_go [--tasks N]
//
// Prints one JSON object: {"ns_per_task": ..., "tasks": ..., "procs": ...}.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

func main() {
	nFlag := flag.Int("tasks", 1000000, "goroutines to start")
	flag.Parse()
	if *nFlag < 1 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "spawn_go: --tasks needs a whole number >= 1")
		os.Exit(2)
	}
	n := *nFlag
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { wg.Done() }()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	fmt.Printf("{\"ns_per_task\": %.1f, \"tasks\": %d, \"procs\": %d}\n",
		float64(elapsed.Nanoseconds())/float64(n), n, runtime.GOMAXPROCS(0))
}
