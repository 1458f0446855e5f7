// PingPong, Go's peer of benchmarks/pingpong.cpp (scripts/bench-peers): two
// goroutines bounce one message through two unbuffered channels, 1,000,000
// round trips. The measuring goroutine starts its clock before its first
// receive, and main sends the first message, as in the tokio peer.
//
//	GOMAXPROCS=1 pingpong_go [--rounds N]
//
// Prints one JSON object: {"ns_per_round_trip": ..., "rounds": ..., "procs": ...}.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"
)

func main() {
	roundsFlag := flag.Int("rounds", 1000000, "round trips")
	flag.Parse()
	if *roundsFlag < 1 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "pingpong_go: --rounds needs a whole number >= 1")
		os.Exit(2)
	}
	rounds := *roundsFlag
	ping, pong := make(chan byte), make(chan byte)
	go func() {
		for i := 0; i < rounds; i++ {
			pong <- <-ping
		}
	}()
	done := make(chan time.Duration)
	go func() {
		var t0 time.Time
		for i := 0; i < rounds; i++ {
			if i == 0 {
				t0 = time.Now()
			}
			v := <-pong
			if i+1 < rounds {
				ping <- v
			}
		}
		done <- time.Since(t0)
	}()
	ping <- 1
	elapsed := <-done
	fmt.Printf("{\"ns_per_round_trip\": %.1f, \"rounds\": %d, \"procs\": %d}\n",
		float64(elapsed.Nanoseconds())/float64(rounds), rounds, runtime.GOMAXPROCS(0))
}
