// weft_bench: every *_bench.cpp of this folder in one Google Benchmark binary.
//   build/benchmarks/weft_bench --benchmark_filter=Yield
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
