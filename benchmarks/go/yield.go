// Context-switch cost, Go's peer of benchmarks/yield.cpp (scripts/bench-peers):
// two goroutines each call runtime.Gosched() 5,000,000 times.
//
//	GOMAXPROCS=1 yield_go [--per-goroutine N]
//
// Prints one JSON object: {"ns_per_yield": ..., "yields": ..., "procs": ...}.
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
	perFlag := flag.Int("per-goroutine", 5000000, "yields per goroutine")
	flag.Parse()
	if *perFlag < 1 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "yield_go: --per-goroutine needs a whole number >= 1")
		os.Exit(2)
	}
	per := *perFlag
	var wg sync.WaitGroup
	t0 := time.Now()
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	fmt.Printf("{\"ns_per_yield\": %.1f, \"yields\": %d, \"procs\": %d}\n",
		float64(elapsed.Nanoseconds())/float64(2*per), 2*per, runtime.GOMAXPROCS(0))
}
