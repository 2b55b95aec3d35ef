// Reference for the kernel benchmark: std::sort of every W-byte row of a raw uint8 file,
// the C++ counterpart of hybridsched's per-row quicksort (introsort, as libstdc++ does).
// Built and run by bench_core.py:  g++ -O3 -o stdsort stdsort.cpp && ./stdsort FILE W REPS
// Prints the best-of-REPS time per row in nanoseconds twice: wall clock (steady_clock), then
// CPU time of this thread (CLOCK_THREAD_CPUTIME_ID, which other load on the machine does not
// inflate). Each rep sorts a fresh copy of the unsorted input; the copy is not timed.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s FILE ROW_BYTES REPS\n", argv[0]);
        return 2;
    }
    const long width = std::atol(argv[2]);
    const int reps = std::atoi(argv[3]);
    std::ifstream in(argv[1], std::ios::binary);
    std::vector<uint8_t> orig((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (width < 1 || reps < 1 || orig.empty() || orig.size() % width != 0) {
        std::fprintf(stderr, "stdsort: bad input (%zu bytes, row %ld)\n", orig.size(), width);
        return 2;
    }
    const size_t rows = orig.size() / width;
    std::vector<uint8_t> work(orig.size());
    double best = 1e300, best_cpu = 1e300;
    for (int r = 0; r < reps; ++r) {
        std::memcpy(work.data(), orig.data(), orig.size());
        timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        auto t0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < rows; ++i) {
            uint8_t* row = work.data() + i * width;
            std::sort(row, row + width);
        }
        auto t1 = std::chrono::steady_clock::now();
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
        best_cpu = std::min(best_cpu, (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9);
    }
    for (size_t i = 0; i < rows; ++i) {  // the result must be sorted, or the timing is void
        const uint8_t* row = work.data() + i * width;
        if (!std::is_sorted(row, row + width)) {
            std::fprintf(stderr, "stdsort: row %zu not sorted\n", i);
            return 1;
        }
    }
    std::printf("%.3f %.3f\n", best / rows * 1e9, best_cpu / rows * 1e9);
    return 0;
}
